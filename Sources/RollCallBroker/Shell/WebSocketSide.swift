import Logging
import RollCallCore
import RollCallSecurity
import RollCallWire

/// The close codes the loop closes a WebSocket with (docs/websocket.md).
public enum GatewayCloseCode {
    /// The connection's token expired and no `auth` renewed it.
    public static let tokenExpired: UInt16 = 4001
    /// A reload of `--jwt-key-file` (SIGHUP) took away the key that checked the connection's token.
    public static let tokenRevoked: UInt16 = 4003
    /// The connection did not read its replies and updates fast enough: its send queue went over its bound.
    public static let tooSlow: UInt16 = 4008
    /// The broker is at its maximum of WebSocket connections, or is stopping.
    public static let unavailable: UInt16 = 1013
}

/// The loop's side of the WebSocket door: its connections and their subscriptions (``GatewayTable``, the rules), and
/// what each connection is sent, through its outbox to the door's threads. Users with privacy settings are delivered
/// per viewer (docs/privacy.md): each subscriber of `presence/<u>/` gets what its token's user may see of u; users
/// without settings take the shared path, one encoding for all.
final class WebSocketSide {
    private(set) var table = GatewayTable()
    private let logger: Logger
    private let metrics: BrokerMetrics

    init(logger: Logger, metrics: BrokerMetrics) {
        self.logger = logger
        self.metrics = metrics
    }

    /// What the connection's token allows, while it is open.
    func access(of id: ConnectionID) -> Access? { table.peers[id]?.access }

    /// A new connection, under an id from the command endpoint's count.
    func open(_ id: ConnectionID, access: Access, outbox: GatewayOutbox) {
        table.peers[id] = GatewayTable.Peer(outbox: outbox, access: access)
        logger.debug("websocket opened", metadata: ["connection": "\(id)", "access": "\(access)"])
    }

    /// A new token for an open connection, and the `auth` reply.
    func reauthorize(_ id: ConnectionID, access: Access, requestID: JSON?, expires: Int64) {
        guard table.peers[id] != nil else { return }
        table.peers[id]?.access = access
        deliver(Codec.encodeGatewayReply(id: requestID, expires: expires), to: id)
        requestDone(id)
    }

    /// The connection's request is answered: the door may hand it the next.
    func requestDone(_ id: ConnectionID) { table.peers[id]?.outbox.requestDone() }

    /// Forgets a connection and its subscriptions.
    func remove(_ id: ConnectionID) { table.remove(id) }

    /// Closes a connection with `code` after what its queue already holds: nothing pushed later reaches it.
    func close(_ id: ConnectionID, code: UInt16, reason: String) {
        table.peers[id]?.outbox.close(code: code, reason: reason)
    }

    /// The connections closed for being too slow since the last call.
    func takeDropping() -> [ConnectionID] {
        guard !table.dropping.isEmpty else { return [] }  // most rounds: none
        defer { table.dropping = [] }
        return table.dropping
    }

    // MARK: Frames

    /// Answers one frame of a connection: a request by `run` (the machine), a subscription by the table's rules, a
    /// resume (`subscribe` with `after`) with what `missed` finds in the log: the transitions after that offset go out
    /// after the reply, in offset order, then the live ones; nothing in between can come first, as all of it happens
    /// in this one call on the loop (docs/history.md). Returns the topics whose last value is due (a coalesced replay).
    func answer(
        _ frame: Result<GatewayRequest, RequestRejection>, from id: ConnectionID,
        limits: (replyBytes: Int, topics: Int),
        run: (RequestEnvelope, Access) -> Result<Reply, PresenceError>?, core: () -> PresenceCore,
        now: BrokerTime
    ) -> [Topic] {
        guard let peer = table.peers[id] else { return [] }  // closed meanwhile: nobody reads the answer
        var answered = true  // a reply that waits for etcd counts as in flight until it goes (EventLoop.send)
        defer { if answered { peer.outbox.requestDone() } }
        switch frame {
        case .failure(let rejection):
            metrics.request(nil, failed: rejection.error.code)
            deliver(Codec.encodeReply(id: rejection.id, .failure(rejection.error)), to: id)
        case .success(.request(let envelope)):
            guard let result = run(envelope, peer.access) else {
                answered = false
                return []
            }
            deliver(Codec.encodeReply(id: envelope.id, result, maxBytes: limits.replyBytes), to: id)
        case .success(.subscribe(let requestID, let topics, _, _)):
            // A resume (with `after`) is expensive work: it comes through EventLoop.startResume, not here.
            return subscribe(
                id, to: topics, requestID: requestID, missed: nil, maxTopics: limits.topics, core: core(), now: now)
        case .success(.unsubscribe(let requestID, let topics)):
            for topic in topics { table.unsubscribe(id, from: topic.bytes) }
            deliver(Codec.encodeGatewayReply(id: requestID), to: id)
        case .success(.auth(let requestID, _)):
            // The gateway checks tokens itself and reauthorizes the connection; an `auth` that reaches here was not
            // checked.
            let error = PresenceError(.badRequest, "auth is answered by the WebSocket gateway")
            deliver(Codec.encodeReply(id: requestID, .failure(error)), to: id)
        }
        return []
    }

    // MARK: Subscriptions

    /// Why the connection may not subscribe to `topics`, or `nil` (GatewayTable.refusal).
    func subscriptionRefusal(
        of topics: [Topic], for id: ConnectionID, maxTopics: Int, core: PresenceCore
    ) -> PresenceError? {
        table.refusal(of: topics, for: id, maxTopics: maxTopics) { core.isMember($0, of: $1) }
    }

    /// A resume's read is back (EventLoop.startResume): refused, or the topics are subscribed and the missed
    /// transitions go out after the reply. The request is done either way. Returns the topics whose last value is due.
    func resumed(
        _ id: ConnectionID, to topics: [Topic], requestID: JSON?, missed: Result<[LogEntry], PresenceError>,
        maxTopics: Int, core: PresenceCore, now: BrokerTime
    ) -> [Topic] {
        guard let peer = table.peers[id] else { return [] }  // closed meanwhile: nobody reads the answer
        defer { peer.outbox.requestDone() }
        switch missed {
        case .failure(let error):
            metrics.request(nil, failed: error.code)
            deliver(Codec.encodeReply(id: requestID, .failure(error)), to: id)
            return []
        case .success(let entries):
            return subscribe(
                id, to: topics, requestID: requestID, missed: entries, maxTopics: maxTopics, core: core, now: now)
        }
    }

    /// Subscribes a connection to every topic its token allows, or to none (GatewayTable.swift): the reply comes
    /// first; with `missed` (a resume), the missed transitions of the presence topics it added, as the viewer may see
    /// them now, then the views of users hidden from it. Returns the topics whose last value it gets by the coalesced
    /// replay (not those a resume stands for).
    private func subscribe(
        _ id: ConnectionID, to topics: [Topic], requestID: JSON?, missed: [LogEntry]?, maxTopics: Int,
        core: PresenceCore, now: BrokerTime
    ) -> [Topic] {
        switch table.subscribe(id, to: topics, maxTopics: maxTopics, isMember: { core.isMember($0, of: $1) }) {
        case nil: return []
        case .failure(let error)?:
            if error.code == .forbidden { metrics.refusedSubscription() }
            metrics.request(nil, failed: error.code)
            deliver(Codec.encodeReply(id: requestID, .failure(error)), to: id)
            return []
        case .success(let new)?:
            deliver(Codec.encodeGatewayReply(id: requestID), to: id)
            if let missed {
                // Only the topics this call added: one the connection already had has had its transitions live.
                let added = Set(new)
                for entry in missed where added.contains(.allPresence) || added.contains(.presence(entry.record.user)) {
                    guard let shown = table.resumed(entry.record, to: id, in: core) else { continue }
                    let topic = Topic.presence(entry.record.user).bytes
                    deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeRecord(shown)), to: id)
                }
                for view in table.hiddenViews(of: new, to: id, in: core, now: now) {
                    let topic = Topic.presence(view.user).bytes
                    deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeRecord(view)), to: id)
                }
            }
            return new.filter { topic in
                if topic == .allPresence { return false }
                if missed != nil, case .presence = topic { return false }  // the resume stands for the last value
                logger.debug("websocket subscribed", metadata: ["connection": "\(id)", "topic": "\(topic.text)"])
                return true
            }
        }
    }

    // MARK: Delivery

    /// Whether some connection subscribes to anything (else publishing skips the door).
    var hasSubscribers: Bool { !table.hasNoSubscribers }

    /// Queues a reply or an update for a connection; closes one whose queue is over its bound. Its subscriptions go
    /// at once; its sessions end at the start of the next round (``takeDropping()``), not in the middle of the
    /// request or publication that filled its queue.
    func deliver(_ frame: [UInt8], to id: ConnectionID) {
        guard let peer = table.peers[id], !peer.dropping else { return }
        guard peer.outbox.push(frame) == .full else { return }
        metrics.closedSlowWebSocket()
        logger.warning(
            "websocket closed: it did not read fast enough",
            metadata: ["connection": "\(id)", "queued": "\(peer.outbox.limitBytes)"])
        peer.outbox.close(
            code: GatewayCloseCode.tooSlow,
            reason: "too slow: more than \(peer.outbox.limitBytes) bytes waited for this connection")
        table.markDropping(id)
    }

    /// Sends a published message to the subscribers of its topic: one look-up, and one encoding shared by all of
    /// them, made only if someone receives it.
    func deliverPublished(_ topic: [UInt8], _ body: () -> [UInt8]) {
        let (exact, everyUser) = table.receivers(of: topic)
        guard exact != nil || everyUser else { return }
        let frame = Codec.encodeUpdate(topic: topic, body: body())
        if let exact { for id in exact { deliver(frame, to: id) } }
        if everyUser {
            for id in table.allPresence where exact?.contains(id) != true { deliver(frame, to: id) }
        }
    }

    /// A record of a user with privacy settings: each subscriber gets what it may see
    /// (``GatewayTable/views(of:replay:in:now:)``).
    func deliverViews(of record: PresenceRecord, replay: Bool, core: PresenceCore, now: BrokerTime) {
        let topic = Topic.presence(record.user).bytes
        for (id, shown) in table.views(of: record, replay: replay, in: core, now: now) {
            deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeRecord(shown)), to: id)
        }
    }

    /// A group message: each subscriber gets it as its viewer sees it, or `body`, the shared encoding; a viewer taken
    /// out of the group nothing (``GatewayTable/views(of:in:now:)``).
    func deliverViews(of update: GroupUpdate, body: [UInt8], core: PresenceCore, now: BrokerTime) {
        let topic = Topic.group(update.group).bytes
        let shared = Codec.encodeUpdate(topic: topic, body: body)
        for (id, own) in table.views(of: update, in: core, now: now) {
            deliver(own.map { Codec.encodeUpdate(topic: topic, body: Codec.encodeGroupUpdate($0)) } ?? shared, to: id)
        }
    }

    /// After a privacy change: each subscriber of the user whose view changed gets the new view at once.
    func resendViews(since before: PrivacySnapshot, core: PresenceCore, now: BrokerTime) {
        let topic = Topic.presence(before.user).bytes
        for (id, view) in table.changedViews(since: before, in: core, now: now) {
            deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeRecord(view)), to: id)
        }
    }
}
