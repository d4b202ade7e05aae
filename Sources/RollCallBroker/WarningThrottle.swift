import RollCallCore

/// A warning that a peer can provoke at will is logged at most once per interval (a metric counts every case), so
/// that a flood of refused connections, handshakes or subscriptions cannot flood the log too.
struct WarningThrottle {
    static let intervalMilliseconds: Int64 = 10_000
    private var last: BrokerTime?

    /// Whether to log now; if so, the next time is an interval away.
    mutating func allows(now: BrokerTime) -> Bool {
        guard last.map({ now - $0 >= Self.intervalMilliseconds }) ?? true else { return false }
        last = now
        return true
    }
}
