import RollCallCore

/// One user as the status page shows it: the record, and the groups the user is in.
public struct UserView: Sendable, Equatable {
    public var record: PresenceRecord
    public var groups: [GroupID]
}

/// The broker's state at a glance, for the status page.
public struct BrokerStatus: Sendable {
    public var broker: String
    public var epoch: String
    public var time: BrokerTime
    public var sessions: Int
    public var usersAvailable: Int
    public var connections: Int
    public var groups: Int
    public var subscriptions: Int
    /// Messages published on the update socket since the start: a rate is the difference of two readings.
    public var published: UInt64
    /// The latest records published, newest last (at most ``EventLoop/recentLimit``).
    public var recent: [PresenceRecord]
}
