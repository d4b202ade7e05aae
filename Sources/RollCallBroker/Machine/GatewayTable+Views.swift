import RollCallCore
import RollCallSecurity
import RollCallWire

/// What each WebSocket connection gets of users with privacy settings (docs/privacy.md, "The paths"), decided from
/// the subscription table and the core that publishes, without a socket: the loop encodes and sends what these
/// return (Shell/WebSocketSide.swift). Users without settings take the shared path, one encoding for all.
extension GatewayTable {
    /// The user a connection views as; `nil` when it sees the truth (no tokens, a reader, an operator).
    func viewer(of id: ConnectionID) -> UserID? {
        guard case .role(.user(let user))? = peers[id]?.access else { return nil }
        return user
    }

    /// The connections that receive `user`'s records: its topic's subscribers, then those of every user's records.
    func receivers(ofUser user: UserID) -> [ConnectionID] {
        let (exact, everyUser) = receivers(of: Topic.presence(user).bytes)
        var ids = Array(exact ?? [])
        if everyUser { ids += allPresence.filter { exact?.contains($0) != true } }
        return ids
    }

    /// What each receiver of a record of a user with settings gets: a change only if its viewer sees the user (the
    /// record as that viewer may see it), a last value (`replay`) its viewer's view; the truth without a viewer.
    func views(
        of record: PresenceRecord, replay: Bool, in core: PresenceCore, now: BrokerTime
    ) -> [(ConnectionID, PresenceRecord)] {
        guard !hasNoSubscribers else { return [] }
        let snapshot = replay ? core.privacySnapshot(of: record.user, now: now) : nil
        return receivers(ofUser: record.user).compactMap { id in
            guard let viewer = viewer(of: id) else { return (id, record) }
            let shown = snapshot.map { $0.view(for: viewer) } ?? core.deliverable(record, to: viewer)
            return shown.map { (id, $0) }
        }
    }

    /// A group message's receivers: each with the message as its viewer sees it (members that block the viewer
    /// offline, their records its views), or `nil` for the shared message. A viewer no longer a member gets nothing
    /// after the message that takes it out, though its subscription stays (it gets the group again if it is put back
    /// in).
    func views(of update: GroupUpdate, in core: PresenceCore, now: BrokerTime) -> [(ConnectionID, GroupUpdate?)] {
        guard !hasNoSubscribers, let receivers = receivers(of: Topic.group(update.group).bytes).exact else {
            return []
        }
        return receivers.compactMap { id in
            guard let viewer = viewer(of: id) else { return (id, nil) }
            guard update.deleted || core.isMember(viewer, of: update.group) || update.removed.contains(viewer) else {
                return nil
            }
            guard core.hasBlocks else { return (id, nil) }
            let shown = core.groupUpdate(update, for: viewer, now: now)
            return (id, shown == update ? nil : shown)
        }
    }

    /// After a privacy change of `before.user`: the receivers with a viewer whose view changed, with the new view
    /// (the bye record for one that lost sight, the current record for one that got it back).
    func changedViews(
        since before: PrivacySnapshot, in core: PresenceCore, now: BrokerTime
    ) -> [(ConnectionID, PresenceRecord)] {
        guard !hasNoSubscribers else { return [] }
        let after = core.privacySnapshot(of: before.user, now: now)
        return receivers(ofUser: before.user).compactMap { id in
            guard let viewer = viewer(of: id) else { return nil }
            let view = after.view(for: viewer)
            return view.showsSame(as: before.view(for: viewer)) ? nil : (id, view)
        }
    }

    /// A transition a resumed subscription of `id` missed, as its viewer may see it now: `nil` for a user hidden from
    /// it (``hiddenViews(of:to:in:now:)`` gives that user's view instead).
    func resumed(_ record: PresenceRecord, to id: ConnectionID, in core: PresenceCore) -> PresenceRecord? {
        guard let viewer = viewer(of: id) else { return record }
        return core.deliverable(record, to: viewer)
    }

    /// After a resume of `topics` by `id`: the view of each user among them hidden from its viewer, which stands for
    /// the transitions left out.
    func hiddenViews(
        of topics: [Topic], to id: ConnectionID, in core: PresenceCore, now: BrokerTime
    ) -> [PresenceRecord] {
        guard let viewer = viewer(of: id) else { return [] }
        return topics.compactMap { topic in
            guard case .presence(let user) = topic, core.restricts(user), !core.sight(of: user, by: viewer).status
            else { return nil }
            return core.view(of: user, for: viewer, now: now)
        }
    }
}
