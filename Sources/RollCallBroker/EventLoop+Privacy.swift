import RollCallCore
import RollCallSecurity
import RollCallWire

/// WebSocket delivery of users with privacy settings (docs/privacy.md): each subscriber of `presence/<u>/` gets
/// what its token's user may see of u. Users without settings take the shared path (one encoding for all).
extension EventLoop {
    /// Publishes a record of a user with privacy settings: on the update socket as for everyone (ZeroMQ
    /// subscriptions are not filtered, a known weakness), and to each WebSocket subscriber what it may see
    /// (``GatewayTable/views(of:replay:in:now:)``).
    func publishRestricted(_ record: PresenceRecord, replay: Bool) {
        let topic = Topic.presence(record.user).bytes
        enqueue(topic, .bytes(Codec.encodeRecord(record)), toGateway: false)
        for (id, shown) in gateway.views(of: record, replay: replay, in: machine.published, now: clock.now()) {
            deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeRecord(shown)), to: id)
        }
    }

    /// A group message to the group's WebSocket subscribers while some user blocks someone: each gets it as its
    /// viewer sees it, or `body`, the shared encoding.
    func deliverGroupViews(_ update: GroupUpdate, body: [UInt8], now: BrokerTime) {
        let topic = Topic.group(update.group).bytes
        let shared = Codec.encodeUpdate(topic: topic, body: body)
        for (id, own) in gateway.views(of: update, in: machine.published, now: now) {
            deliver(own.map { Codec.encodeUpdate(topic: topic, body: Codec.encodeGroupUpdate($0)) } ?? shared, to: id)
        }
    }

    /// After a privacy change: each WebSocket subscriber of the user whose view changed gets the new view at once.
    func resendViews(since before: PrivacySnapshot) {
        let topic = Topic.presence(before.user).bytes
        for (id, view) in gateway.changedViews(since: before, in: machine.published, now: clock.now()) {
            deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeRecord(view)), to: id)
        }
    }

    /// A transition a resumed WebSocket subscription missed, as the connection's viewer may see it now.
    func resumed(_ record: PresenceRecord, to id: ConnectionID) -> PresenceRecord? {
        gateway.resumed(record, to: id, in: machine.published)
    }

    /// After a resume: the views of the users hidden from the connection's viewer, which stand for the transitions
    /// left out.
    func deliverHiddenViews(of topics: [Topic], to id: ConnectionID) {
        for view in gateway.hiddenViews(of: topics, to: id, in: machine.published, now: clock.now()) {
            deliver(Codec.encodeUpdate(topic: Topic.presence(view.user).bytes, body: Codec.encodeRecord(view)), to: id)
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
