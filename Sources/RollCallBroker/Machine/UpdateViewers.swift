import RollCallCore

/// Who follows whom on the update socket with a `user` key (CURVE), and what each gets of users with privacy
/// settings (docs/privacy.md, "ZeroMQ subscriptions"): a pure table the update endpoint keeps from the subscriptions it
/// reads, without a socket.
///
/// libzmq cannot take back a subscription it applied, nor filter one topic per subscriber. So a `user` key's
/// subscription to `presence/<u>/` is applied as two topics it can keep for ever without seeing anything it may not:
/// `presence/<u>/*/`, where u's records go while u has no privacy settings (once for all), and
/// `presence/<u>/<viewer>/`, where each viewer gets its own view of u while u has settings. The truth stays on
/// `presence/<u>/`, which only readers', operators' and open access's subscriptions hold.
///
/// The table names the viewers to send copies to, never fewer than follow: a viewer's explicit unsubscription takes
/// its own count down, and libzmq's unsubscriptions for a subscriber that left (which carry no key) count down the
/// user's subscriptions of every kind, the viewers going only when none is left. libzmq reports a leaving
/// subscriber's topic once, however often it subscribed, so repeated subscriptions keep the count above zero and the
/// viewers listed: their copies go to topics no one holds, which libzmq drops. That is the price of never missing one.
struct UpdateViewers {
    /// For each followed user, its viewers with their count of subscriptions.
    private var viewers: [UserID: [UserID: Int]] = [:]
    /// For each user, the subscriptions to its topic read (applied or not, any key) less libzmq's unsubscriptions
    /// for subscribers that left: while above zero, some connection may hold the topic.
    private var subscriptions: [UserID: Int] = [:]
    /// The most users whose subscriptions are counted; past it, a new user's viewers are kept for ever.
    let limit: Int

    init(limit: Int = 1_000_000) { self.limit = limit }

    /// Whether no `user` key follows anyone (always so without CURVE): the shared path as before.
    var isEmpty: Bool { viewers.isEmpty }

    /// The viewers following `user`.
    func viewers(of user: UserID) -> Dictionary<UserID, Int>.Keys? { viewers[user]?.keys }

    /// Whether `user`'s records go on `presence/<user>/*/` rather than `presence/<user>/`: some `user` key follows
    /// the user, who has no privacy settings.
    func publishesForEveryone(_ user: UserID, in core: PresenceCore) -> Bool {
        viewers[user] != nil && !core.restricts(user)
    }

    /// A subscription to `user`'s topic was read, from `viewer`'s key when a `user` key made it and it was applied.
    mutating func subscribed(to user: UserID, by viewer: UserID?) {
        if subscriptions[user] != nil || subscriptions.count < limit { subscriptions[user, default: 0] += 1 }
        if let viewer { viewers[user, default: [:]][viewer, default: 0] += 1 }
    }

    /// `viewer`'s key unsubscribed from `user`'s topic.
    mutating func unsubscribed(_ viewer: UserID, from user: UserID) {
        guard let count = viewers[user]?[viewer] else { return }
        if count > 1 {
            viewers[user]![viewer] = count - 1
        } else {
            viewers[user]![viewer] = nil
            if viewers[user]!.isEmpty { viewers[user] = nil }
        }
    }

    /// libzmq unsubscribed a subscriber that left from `user`'s topic: when no subscription is left, no viewer
    /// follows the user.
    mutating func subscriberLeft(_ user: UserID) {
        guard let count = subscriptions[user] else { return }
        if count > 1 {
            subscriptions[user] = count - 1
        } else {
            subscriptions[user] = nil
            viewers[user] = nil
        }
    }

    /// What each viewer of a user with settings gets of `record`: a change only if the viewer sees the user (as it
    /// may see it); a last value (`replay`) the viewer's view, whatever it is. Nothing for a user without settings:
    /// its records go once, for everyone.
    func copies(
        of record: PresenceRecord, replay: Bool, in core: PresenceCore, now: BrokerTime
    ) -> [(UserID, PresenceRecord)] {
        guard let followers = viewers[record.user], core.restricts(record.user) else { return [] }
        let snapshot = replay ? core.privacySnapshot(of: record.user, now: now) : nil
        return followers.keys.sorted().compactMap { viewer in
            let shown = snapshot.map { $0.view(for: viewer) } ?? core.deliverable(record, to: viewer)
            return shown.map { (viewer, $0) }
        }
    }

    /// After a privacy change of `before.user`: the viewers whose view changed, with the new view (the bye record for
    /// one that lost sight, the current record for one that got it back).
    func changedViews(
        since before: PrivacySnapshot, in core: PresenceCore, now: BrokerTime
    ) -> [(UserID, PresenceRecord)] {
        guard let followers = viewers[before.user] else { return [] }
        let after = core.privacySnapshot(of: before.user, now: now)
        return followers.keys.sorted().compactMap { viewer in
            let view = after.view(for: viewer)
            return view.showsSame(as: before.view(for: viewer)) ? nil : (viewer, view)
        }
    }
}
