import Observation
import RollCallClientCore
import RollCallCore

/// The presence a view reads: every followed user's and group's last known state, the session's and the broker's
/// health. `@Observable`, so a SwiftUI view that reads `store[bob].status` is redrawn when bob's record changes, and
/// only then; everything is changed on the main actor, by the client, in the order the broker sent it.
@MainActor @Observable
public final class PresenceStore {
    /// Every user the store has a record of.
    public private(set) var users: [UserID: UserPresence] = [:]
    /// Every group the store has an aggregate of.
    public private(set) var groups: [GroupID: GroupPresence] = [:]
    /// Where the app's own session stands (`nil` for a client that only watches).
    public private(set) var session: SessionMachine.Phase?
    /// Whether the watch's connection is open.
    public private(set) var watching = false
    /// Whether the broker's heartbeat stopped: every dot shown may be stale.
    public private(set) var brokerLost = false
    /// Broker time minus this device's time, in milliseconds, from the broker's heartbeat: for "last seen 5 min
    /// ago" without trusting the device's clock against the broker's (docs/protocol.md §10.1).
    public private(set) var brokerClockOffset: Int64 = 0

    /// An empty store, or one holding `cached` records (read from the cache file at a cold start), all stale.
    public init(cached: [PresenceRecord] = []) {
        for record in cached { users[record.user] = UserPresence(record, stale: true) }
    }

    /// What the store knows of `user` (``UserPresence/unknown(_:)`` if nothing).
    public subscript(user: UserID) -> UserPresence { users[user] ?? .unknown(user) }

    /// What the store knows of `group` (``GroupPresence/unknown(_:)`` if nothing).
    public func group(_ group: GroupID) -> GroupPresence { groups[group] ?? .unknown(group) }

    /// How long ago `user` was last available, on the broker's clock, as of `now` (this device's milliseconds since
    /// 1970); `nil` if the user is available now or was never seen available.
    public func lastSeenAgo(_ user: UserID, now: Int64) -> Int64? {
        guard let presence = users[user], !presence.isAvailable, let lastSeen = presence.lastSeen else { return nil }
        return max(0, now + brokerClockOffset - lastSeen)
    }

    // MARK: Changes, made by the client

    /// A record the watch machine let through: it has passed the seq rule there, which knows about epochs.
    func apply(_ record: PresenceRecord) {
        users[record.user] = UserPresence(record, stale: false)
    }

    /// A group message the watch machine let through.
    func apply(_ update: GroupUpdate) {
        if update.deleted {
            groups[update.group] = GroupPresence(
                group: update.group, online: 0, total: 0, counts: StatusCounts(), deleted: true, stale: false)
            return
        }
        groups[update.group] = GroupPresence(
            group: update.group, online: update.counts.available, total: update.counts.total, counts: update.counts,
            deleted: false, stale: false)
        for record in update.changed { apply(record) }
    }

    func forget(_ user: UserID) { users[user] = nil }

    func forget(_ group: GroupID) { groups[group] = nil }

    func setSession(_ phase: SessionMachine.Phase?) {
        if session != phase { session = phase }
    }

    func setWatching(_ open: Bool) {
        if watching != open { watching = open }
    }

    /// The broker fell silent (everything becomes stale) or came back (each record becomes fresh when its current
    /// value arrives, which the resync asks for).
    func setBrokerLost(_ lost: Bool) {
        guard brokerLost != lost else { return }
        brokerLost = lost
        guard lost else { return }
        for user in users.keys { users[user]?.stale = true }
        for group in groups.keys { groups[group]?.stale = true }
    }

    /// Keeps the offset to within a second: a change of a few milliseconds at every heartbeat would redraw every
    /// view that shows "last seen" once a second for nothing.
    func setClockOffset(brokerTime: Int64, deviceTime: Int64) {
        let offset = brokerTime - deviceTime
        if abs(brokerClockOffset - offset) > 1_000 { brokerClockOffset = offset }
    }

    /// The records to keep in the cache file.
    var records: [PresenceRecord] {
        users.values.filter(\.known).map { presence in
            PresenceRecord(
                user: presence.user, status: presence.status, text: presence.text,
                since: presence.since.map(BrokerTime.init), lastSeen: presence.lastSeen.map(BrokerTime.init),
                sessions: presence.isAvailable ? 1 : 0, seq: presence.seq)
        }
    }
}
