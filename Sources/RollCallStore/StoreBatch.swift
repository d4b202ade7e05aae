import RollCallCore

/// Changes written together, in one transaction.
public struct StoreBatch: Sendable, Equatable {
    /// Upserted by user id; if a user appears twice, the last record wins.
    public var records: [PresenceRecord]
    /// Upserted: the stored membership is replaced by `members`.
    public var groups: [StoredGroup]
    /// Deleted with their members, after `groups` are written: a group in both lists ends up deleted.
    public var deletedGroups: [GroupID]
    /// Stored if greater than the stored one.
    public var brokerTime: BrokerTime
    /// Appended to the presence log, in offset order (docs/history.md).
    public var log: [LogEntry]
    /// Users' privacy settings, each replacing what is stored for that user; empty settings delete it
    /// (docs/privacy.md).
    public var privacy: [PrivacySettings]
    /// Before ``log`` is appended: the log is to be under this epoch (a cluster's), and starts over if it is not.
    public var logStart: LogStart?
    /// After ``log`` is appended: the log no longer continues cursors below this floor (a cluster node's gap).
    public var logFloor: LogFloor?

    public init(
        records: [PresenceRecord] = [], groups: [StoredGroup] = [], deletedGroups: [GroupID] = [],
        brokerTime: BrokerTime, log: [LogEntry] = [], privacy: [PrivacySettings] = []
    ) {
        self.privacy = privacy
        self.records = records
        self.groups = groups
        self.deletedGroups = deletedGroups
        self.brokerTime = brokerTime
        self.log = log
    }

    /// A batch with no records and no group changes; writing it does nothing, not even store `brokerTime`.
    public var isEmpty: Bool {
        records.isEmpty && groups.isEmpty && deletedGroups.isEmpty && log.isEmpty && privacy.isEmpty
            && logStart == nil && logFloor == nil
    }
}
