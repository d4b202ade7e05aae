import RollCallCore
import RollCallSecurity
import RollCallWire

/// WebSocket delivery of users with privacy settings (docs/privacy.md): each subscriber of `presence/<u>/` gets
/// what its token's user may see of u. Users without settings take the shared path (one encoding for all).
extension EventLoop {
    /// The user a WebSocket connection views as; `nil` when it sees the truth (no tokens, a reader, an operator).
    func viewer(of id: ConnectionID) -> UserID? {
        guard case .role(.user(let user))? = gateway.peers[id]?.access else { return nil }
        return user
    }

    /// The WebSocket connections that receive `user`'s records.
    private func gatewayReceivers(of user: UserID) -> [ConnectionID] {
        let (exact, everyUser) = gateway.receivers(of: Topic.presence(user).bytes)
        var ids = Array(exact ?? [])
        if everyUser { ids += gateway.allPresence.filter { exact?.contains($0) != true } }
        return ids
    }

    /// Publishes a record of a user with privacy settings: on the update socket as for everyone (ZeroMQ
    /// subscriptions are not filtered, a known weakness), and to each WebSocket subscriber what it may see: a
    /// change only while it sees the user, or, for a last value (`replay`), its view.
    func publishRestricted(_ record: PresenceRecord, replay: Bool) {
        let topic = Topic.presence(record.user).bytes
        enqueue(topic, .bytes(Codec.encodeRecord(record)), toGateway: false)
        guard !gateway.hasNoSubscribers else { return }
        let core = machine.published
        let snapshot = replay ? core.privacySnapshot(of: record.user, now: clock.now()) : nil
        for id in gatewayReceivers(of: record.user) {
            var shown: PresenceRecord? = record
            if let viewer = viewer(of: id) {
                shown = snapshot.map { $0.view(for: viewer) } ?? core.deliverable(record, to: viewer)
            }
            guard let shown else { continue }
            deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeRecord(shown)), to: id)
        }
    }

    /// A group message to the group's WebSocket subscribers while some user blocks someone: a subscriber whose user
    /// is blocked by a member gets the message as it sees it (those members offline, their records its views);
    /// every other subscriber gets `body`, the shared encoding.
    func deliverGroupViews(_ update: GroupUpdate, body: [UInt8], now: BrokerTime) {
        guard !gateway.hasNoSubscribers else { return }
        let topic = Topic.group(update.group).bytes
        guard let receivers = gateway.receivers(of: topic).exact else { return }
        let shared = Codec.encodeUpdate(topic: topic, body: body)
        let core = machine.published
        for id in receivers {
            if let viewer = viewer(of: id) {
                let shown = core.groupUpdate(update, for: viewer, now: now)
                if shown != update {
                    deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeGroupUpdate(shown)), to: id)
                    continue
                }
            }
            deliver(shared, to: id)
        }
    }

    /// After a privacy change: each WebSocket subscriber of the user whose view changed gets the new view at once
    /// (the bye record when it lost sight, the current record when it got sight back).
    func resendViews(since before: PrivacySnapshot) {
        guard !gateway.hasNoSubscribers else { return }
        let topic = Topic.presence(before.user).bytes
        let after = machine.published.privacySnapshot(of: before.user, now: clock.now())
        for id in gatewayReceivers(of: before.user) {
            guard let viewer = viewer(of: id) else { continue }
            let view = after.view(for: viewer)
            guard !view.showsSame(as: before.view(for: viewer)) else { continue }
            deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeRecord(view)), to: id)
        }
    }

    /// A transition a resumed WebSocket subscription missed, as the connection's viewer may see it now: `nil` for a
    /// user hidden from it (``deliverHiddenViews(of:to:)`` sends that user's view instead).
    func resumed(_ record: PresenceRecord, to id: ConnectionID) -> PresenceRecord? {
        guard let viewer = viewer(of: id) else { return record }
        return machine.published.deliverable(record, to: viewer)
    }

    /// After a resume: each presence topic of a user hidden from the connection's viewer gets that viewer's view,
    /// which stands for the transitions left out.
    func deliverHiddenViews(of topics: [Topic], to id: ConnectionID) {
        guard let viewer = viewer(of: id) else { return }
        let core = machine.published
        for case .presence(let user) in topics where core.restricts(user) && !core.sight(of: user, by: viewer).status {
            let view = core.view(of: user, for: viewer, now: clock.now())
            deliver(Codec.encodeUpdate(topic: Topic.presence(user).bytes, body: Codec.encodeRecord(view)), to: id)
        }
    }

    /// Applies a contacts file read off the loop (``Broker/reloadContacts()``): each WebSocket subscriber whose view
    /// changed gets its new view at once. A file the machine refuses changes nothing.
    func loadContacts(_ lists: [ContactList], from path: String, at reason: String) {
        let started = ContinuousClock.now
        switch machine.loadContacts(lists, now: clock.now()) {
        case .success(let changed):
            carryOutEffects()
            logger.notice(
                "\(reason): contacts file reloaded",
                metadata: [
                    "file": "\(path)", "users": "\(lists.count)", "changed": "\(changed)",
                    "ms": "\((ContinuousClock.now - started).wholeMilliseconds)",
                ])
        case .failure(let refusal):
            logger.error(
                "\(reason): contacts file NOT reloaded; the previous contacts stay",
                metadata: ["file": "\(path)", "error": "\(refusal.message)"])
        }
    }
}
