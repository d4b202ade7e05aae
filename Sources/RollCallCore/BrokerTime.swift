/// A point on the broker's clock, in milliseconds since the Unix epoch. The broker's clock only moves forward;
/// the core never reads a clock of its own, it is handed the time with every event.
public struct BrokerTime: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var milliseconds: Int64
    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    public static func < (lhs: BrokerTime, rhs: BrokerTime) -> Bool { lhs.milliseconds < rhs.milliseconds }
    public static func + (lhs: BrokerTime, rhs: Int64) -> BrokerTime {
        BrokerTime(milliseconds: lhs.milliseconds + rhs)
    }
    public static func - (lhs: BrokerTime, rhs: BrokerTime) -> Int64 { lhs.milliseconds - rhs.milliseconds }
    public var description: String { "\(milliseconds)ms" }
}
