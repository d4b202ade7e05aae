import RollCallCore

/// Everything the broker keeps across restarts.
public struct StoredState: Sendable, Equatable {
    /// Every user's last record, sorted by user.
    public var records: [PresenceRecord]
    /// The groups, sorted by group.
    public var groups: [StoredGroup]
    /// The latest broker time any batch carried; the broker's clock starts above it so seq and times never go back.
    public var brokerTime: BrokerTime?
    /// How many stored rows could not be read (an invalid id, a status that is not a ``Status``, a value of the
    /// wrong type) and were left out, members of such a group included. They do not stop a restart: the broker
    /// should log the count. Always 0 for a ``MemoryStore``.
    public var skippedRows: Int
    /// Users' privacy settings, sorted by user (docs/privacy.md).
    public var privacy: [PrivacySettings]

    public init(
        records: [PresenceRecord] = [], groups: [StoredGroup] = [], brokerTime: BrokerTime? = nil, skippedRows: Int = 0,
        privacy: [PrivacySettings] = []
    ) {
        self.privacy = privacy
        self.records = records
        self.groups = groups
        self.brokerTime = brokerTime
        self.skippedRows = skippedRows
    }
}
