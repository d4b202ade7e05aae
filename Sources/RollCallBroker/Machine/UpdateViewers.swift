import RollCallCore
import RollCallWire

/// Who follows what on the update socket with a `user` key (CURVE), and what each gets of users with privacy settings
/// and of groups (docs/privacy.md, "ZeroMQ subscriptions"): a pure table the update endpoint keeps from the
/// subscriptions it reads, without a socket.
///
/// libzmq cannot take back a subscription it applied, nor filter one topic per subscriber. So a `user` key's
/// subscription to `presence/<u>/` (or `group/<g>/`) is applied as two topics it can keep for ever without seeing
/// anything it may not: `presence/<u>/*/`, where u's records go once for all while every viewer following u sees them
/// whole, and `presence/<u>/<viewer>/`, where each viewer gets its own view of u while some viewer following u may not
/// see all of it. The truth stays on `presence/<u>/`, which only readers', operators' and open access's subscriptions
/// hold. Groups alike: a group's message goes once for all while every viewer following it is a member that no member
/// blocks, else to each member following it, as it may see it.
///
/// The table names the viewers that may hold those topics, never fewer: libzmq's unsubscriptions for a subscriber
/// that left carry no key, so they count down the topic's subscriptions of every kind, and the viewers go only when
/// none is left. A viewer's own unsubscription does not take it off: libzmq passes one for a topic the connection does
/// not hold as well, and a key that could take itself off the table while another of its connections holds the `*/`
/// topic would receive there what it may not see. libzmq reports a leaving subscriber's topic once, however often it
/// subscribed, so repeated subscriptions keep the count above zero too. A listed viewer that no longer follows costs
/// copies sent to a topic no one holds (libzmq drops them), and if it may not see all of a user or group, keeps its
/// messages off the `*/` topic: the price of never showing anyone what it may not see.
struct UpdateViewers {
    /// For each followed topic (`presence/<u>/` or `group/<g>/`), the viewers that may hold its forms.
    private var viewers: [Topic: Set<UserID>] = [:]
    /// For each topic, the subscriptions to it read (applied or not, any key) less libzmq's unsubscriptions for
    /// subscribers that left: while above zero, some connection may hold the topic.
    private var subscriptions: [Topic: Int] = [:]
    /// The most topics whose subscriptions are counted. Past it, a topic goes uncounted, and no viewer is forgotten
    /// any more: a topic counted anew later would count down without the subscriptions it missed.
    let limit: Int
    /// Whether a subscription went uncounted, past the limit.
    private(set) var overflowed = false

    init(limit: Int = 1_000_000) { self.limit = limit }

    /// Whether no `user` key follows anything (always so without CURVE): the shared path as before.
    var isEmpty: Bool { viewers.isEmpty }

    /// The viewers following `topic`.
    func viewers(of topic: Topic) -> Set<UserID>? { viewers[topic] }

    /// Where a message goes on the update socket.
    enum Delivery<Message: Equatable>: Equatable {
        /// The topic itself, which only readers, operators and open access hold: no `user` key follows it.
        case truth
        /// The topic's `*/` form, once for all: every `user` key following it sees the message whole.
        case forEveryone
        /// The truth, and each viewer that may see it its own view on the topic's `<viewer>/` form.
        case copies([Copy<Message>])
    }

    struct Copy<Message: Equatable>: Equatable {
        let viewer: UserID
        let message: Message
    }

    /// A subscription to `topic` was read, from `viewer`'s key when a `user` key made it and it was applied.
    mutating func subscribed(to topic: Topic, by viewer: UserID?) {
        if subscriptions[topic] != nil || subscriptions.count < limit {
            subscriptions[topic, default: 0] += 1
        } else {
            overflowed = true
        }
        if let viewer { viewers[topic, default: []].insert(viewer) }
    }

    /// libzmq unsubscribed a subscriber that left from `topic`: when no subscription is left, no viewer follows it.
    mutating func subscriberLeft(_ topic: Topic) {
        guard !overflowed, let count = subscriptions[topic] else { return }
        if count > 1 {
            subscriptions[topic] = count - 1
        } else {
            subscriptions[topic] = nil
            viewers[topic] = nil
        }
    }

    /// Where `record` goes: once for all while every viewer following its user sees it whole (a user without privacy
    /// settings always), else a copy to each viewer that sees the user, as it may see it; a last value (`replay`)
    /// gives each viewer its view, whatever it is.
    func delivery(
        of record: PresenceRecord, replay: Bool, in core: PresenceCore, now: BrokerTime
    ) -> Delivery<PresenceRecord> {
        guard let followers = viewers[.presence(record.user)] else { return .truth }
        guard core.restricts(record.user) else { return .forEveryone }
        let snapshot = replay ? core.privacySnapshot(of: record.user, now: now) : nil
        return Self.delivery(of: record, to: followers) { viewer in
            snapshot.map { $0.view(for: viewer) } ?? core.deliverable(record, to: viewer)
        }
    }

    /// Where a group message goes: once for all while every viewer following the group is a member (or the message
    /// takes it out) and sees it whole, else to each such viewer as it sees it (members that block it offline).
    func delivery(of update: GroupUpdate, in core: PresenceCore, now: BrokerTime) -> Delivery<GroupUpdate> {
        guard let followers = viewers[.group(update.group)] else { return .truth }
        return Self.delivery(of: update, to: followers) { viewer in
            guard update.deleted || core.isMember(viewer, of: update.group) || update.removed.contains(viewer) else {
                return nil
            }
            return core.groupUpdate(update, for: viewer, now: now)
        }
    }

    private static func delivery<Message: Equatable>(
        of message: Message, to followers: Set<UserID>, as shown: (UserID) -> Message?
    ) -> Delivery<Message> {
        let copies = followers.sorted().compactMap { viewer in shown(viewer).map { Copy(viewer: viewer, message: $0) } }
        let whole = copies.count == followers.count && copies.allSatisfy { $0.message == message }
        return whole ? .forEveryone : .copies(copies)
    }

    /// After a privacy change of `before.user`: the viewers whose view changed, with the new view (the bye record for
    /// one that lost sight, the current record for one that got it back).
    func changedViews(
        since before: PrivacySnapshot, in core: PresenceCore, now: BrokerTime
    ) -> [Copy<PresenceRecord>] {
        guard let followers = viewers[.presence(before.user)] else { return [] }
        let after = core.privacySnapshot(of: before.user, now: now)
        return followers.sorted().compactMap { viewer in
            let view = after.view(for: viewer)
            return view.showsSame(as: before.view(for: viewer)) ? nil : Copy(viewer: viewer, message: view)
        }
    }
}
