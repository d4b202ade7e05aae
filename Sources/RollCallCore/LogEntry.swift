/// One transition in the presence log (docs/history.md): a record the broker published for a user, with the
/// offset that names it in the log and the broker time at which it was made.
public struct LogEntry: Equatable, Sendable {
    /// Only grows, never reused, kept across restarts; not consecutive (it never falls behind the broker's clock in
    /// microseconds, so that offsets handed out just before a crash are not handed out again).
    public var offset: UInt64
    /// The broker time of the transition.
    public var time: BrokerTime
    /// The record as it was published, its `offset` included.
    public var record: PresenceRecord

    public init(offset: UInt64, time: BrokerTime, record: PresenceRecord) {
        self.offset = offset
        self.time = time
        self.record = record
    }
}
