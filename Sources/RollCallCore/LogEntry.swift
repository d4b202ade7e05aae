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

/// The epoch a node of a cluster keeps its log under (docs/history.md, "On a cluster"): the same on every node. A
/// log under another epoch (a single broker's, a former cluster's, or one started over after the disk failed) is
/// emptied and continues no cursor through `floor`, the offsets handed out before it.
public struct LogStart: Sendable, Equatable {
    public var epoch: String
    public var floor: UInt64

    public init(epoch: String, floor: UInt64) {
        self.epoch = epoch
        self.floor = floor
    }
}

/// A hole in a cluster node's log (it loaded a snapshot of etcd rather than its history): entries below `keepFrom`
/// are deleted, and no cursor below `through` continues (it may miss transitions of the hole).
public struct LogFloor: Sendable, Equatable {
    public var through: UInt64
    public var keepFrom: UInt64

    public init(through: UInt64, keepFrom: UInt64) {
        self.through = through
        self.keepFrom = keepFrom
    }

    /// The higher of two floors.
    public func raised(to other: LogFloor?) -> LogFloor {
        guard let other else { return self }
        return LogFloor(through: max(through, other.through), keepFrom: max(keepFrom, other.keepFrom))
    }
}
