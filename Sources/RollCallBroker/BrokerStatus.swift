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
    /// The latest records published, newest last (at most ``UpdateEndpoint/recentLimit``).
    public var recent: [PresenceRecord]
}

extension BrokerStatus {
    /// The loop's state as of `now`.
    init(machine: BrokerMachine, commands: CommandEndpoint, updates: UpdateEndpoint, now: BrokerTime) {
        let published = machine.published
        self.init(
            broker: machine.configuration.brokerID, epoch: machine.epoch, time: now,
            sessions: machine.core.sessionCount, usersAvailable: published.availableUserCount,
            connections: commands.connectionCount, groups: published.groupCount, subscriptions: updates.topics.count,
            published: updates.publishedCount, recent: Array(updates.recentRecords))
    }
}
