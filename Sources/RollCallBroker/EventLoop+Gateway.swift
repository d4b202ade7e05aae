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

extension EventLoop {
    /// A new WebSocket connection: a fresh connection id from the same count as the command endpoint's.
    func openGatewayConnection(access: Access, outbox: GatewayOutbox) -> ConnectionID {
        let id = connections.issue()
        gateway.peers[id] = GatewayTable.Peer(outbox: outbox, access: access)
        logger.debug("websocket opened", metadata: ["connection": "\(id)", "access": "\(access)"])
        return id
    }

    /// A new token for an open connection.
    func reauthorizeGatewayConnection(_ id: ConnectionID, access: Access, id requestID: JSON?, expires: Int64) {
        guard gateway.peers[id] != nil else { return }
        gateway.peers[id]?.access = access
        deliver(Codec.encodeGatewayReply(id: requestID, expires: expires), to: id)
        gateway.peers[id]?.outbox.requestDone()
    }

    /// Takes one frame of a WebSocket connection: answered at once, or, when it is an expensive read or the
    /// connection already waits for one, in its turn in the loop's one fair queue (EventLoop+Fairness.swift), so
    /// that WebSocket reads cannot starve anyone either. Replies keep the order of the connection's requests.
    func handleGatewayRequest(_ request: Result<GatewayRequest, RequestRejection>, from id: ConnectionID) {
        guard gateway.peers[id] != nil else { return }  // closed meanwhile: nobody reads the answer
        let work = Work.gateway(request)
        let key = FairnessKey.webSocket(id)
        if work.isExpensive || deferred.isWaiting(key) {
            enqueue(work, body: [], key: key, route: .webSocket(id))
        } else {
            answerGateway(request, from: id)
        }
    }

    /// Answers one frame of a WebSocket connection.
    func answerGateway(_ request: Result<GatewayRequest, RequestRejection>, from id: ConnectionID) {
        guard let peer = gateway.peers[id] else { return }  // closed meanwhile: nobody reads the answer
        defer { peer.outbox.requestDone() }
        switch request {
        case .failure(let rejection):
            metrics.request(nil, failed: rejection.error.code)
            deliver(Codec.encodeReply(id: rejection.id, .failure(rejection.error)), to: id)
        case .success(.request(let envelope)):
            let result = counted(envelope.request, connection: id, access: peer.access)
            deliver(Codec.encodeReply(id: envelope.id, result, maxBytes: configuration.maxReplyBytes), to: id)
        case .success(.subscribe(let requestID, let topics, nil, _)):
            subscribe(id, to: topics, requestID: requestID)
        case .success(.subscribe(let requestID, let topics, let after?, let epoch)):
            resume(id, to: topics, after: after, logEpoch: epoch, requestID: requestID)
        case .success(.unsubscribe(let requestID, let topics)):
            for topic in topics { gateway.unsubscribe(id, from: topic.bytes) }
            deliver(Codec.encodeGatewayReply(id: requestID), to: id)
        case .success(.auth(let requestID, _)):
            // The gateway checks tokens itself and sends ``reauthorizeGatewayConnection``; one that reaches the loop
            // was not checked.
            deliver(
                Codec.encodeReply(
                    id: requestID, .failure(PresenceError(.badRequest, "auth is answered by the WebSocket gateway"))),
                to: id)
        }
    }

    /// Subscribes a connection to every topic its token allows, or to none (GatewayTable.swift): the reply comes
    /// first, then the last value of each new topic, by the same coalesced replay as on the update socket. With
    /// `missed` (a resume), those transitions go out after the reply instead of the presence topics' last values.
    func subscribe(
        _ id: ConnectionID, to topics: [Topic], requestID: JSON?, missed: [LogEntry]? = nil
    ) {
        let maxTopics = configuration.webSocket.maxSubscriptions
        switch gateway.subscribe(id, to: topics, maxTopics: maxTopics, isMember: { machine.isMember($0, of: $1) }) {
        case nil: return
        case .failure(let error)?:
            if error.code == .forbidden { metrics.refusedSubscription() }
            metrics.request(nil, failed: error.code)
            deliver(Codec.encodeReply(id: requestID, .failure(error)), to: id)
        case .success(let new)?:
            deliver(Codec.encodeGatewayReply(id: requestID), to: id)
            if let missed {
                // Only the topics this call added: one the connection already had has had its transitions live.
                let added = Set(new)
                for entry in missed where added.contains(.allPresence) || added.contains(.presence(entry.record.user)) {
                    guard let shown = resumed(entry.record, to: id) else { continue }  // EventLoop+Privacy.swift
                    let topic = Topic.presence(entry.record.user).bytes
                    deliver(Codec.encodeUpdate(topic: topic, body: Codec.encodeRecord(shown)), to: id)
                }
                deliverHiddenViews(of: new, to: id)
            }
            let now = loopBeat.now
            for topic in new where topic != .allPresence {
                if missed != nil, case .presence = topic { continue }  // the resume stands for the last value
                logger.debug("websocket subscribed", metadata: ["connection": "\(id)", "topic": "\(topic.text)"])
                if replays.request(topic, now: now) { replay(topic) }
            }
        }
    }

    /// The connection closed, or the loop closes it: its subscriptions go, and its sessions end by the close path.
    func dropGatewayConnection(_ id: ConnectionID) {
        guard gateway.peers[id] != nil else { return }
        // Its queued writes (a bye behind a large read) still count, as on the command endpoint; its reads go.
        finishDeferredWork(.webSocket(id))
        gateway.remove(id)
        let users = machine.connectionClosed(id, now: clock.now())
        carryOutEffects()
        logger.debug("websocket closed", metadata: ["connection": "\(id)", "users": "\(users)"])
    }

    /// The key that checked the connection's token was taken away (SIGHUP): as for a CURVE key (``revoke(_:)``), its
    /// subscriptions go and nothing more is delivered to it, its sessions end at once, reason `revoked`, and it is
    /// closed with 4003 after what was already queued. Its close, when it comes, ends nothing more.
    func revokeGatewayConnection(_ id: ConnectionID) {
        guard let peer = gateway.peers[id] else { return }
        peer.outbox.close(code: GatewayCloseCode.tokenRevoked, reason: "token revoked")
        finishDeferredWork(.webSocket(id))
        gateway.remove(id)
        let ended = machine.revoke([id], now: clock.now())
        carryOutEffects()
        logger.notice(
            "websocket token revoked: its sessions ended (reason revoked) and the connection closed (4003)",
            metadata: ["connection": "\(id)", "sessions_ended": "\(ended)"])
    }

    /// Queues a reply or an update for a connection; closes one whose queue is over its bound. Its subscriptions go
    /// at once; its sessions end at the start of the next round (``dropSlowGatewayConnections()``), not in the middle
    /// of the request or publication that filled its queue.
    func deliver(_ frame: [UInt8], to id: ConnectionID) {
        guard let peer = gateway.peers[id], !peer.dropping else { return }
        guard peer.outbox.push(frame) == .full else { return }
        metrics.closedSlowWebSocket()
        logger.warning(
            "websocket closed: it did not read fast enough",
            metadata: ["connection": "\(id)", "queued": "\(peer.outbox.limitBytes)"])
        peer.outbox.close(
            code: GatewayCloseCode.tooSlow,
            reason: "too slow: more than \(peer.outbox.limitBytes) bytes waited for this connection")
        gateway.markDropping(id)
    }

    /// Drops the connections closed for being too slow since the last round.
    func dropSlowGatewayConnections() {
        for id in gateway.dropping { dropGatewayConnection(id) }
        gateway.dropping.removeAll(keepingCapacity: true)
    }

    /// Sends a published message to the WebSocket subscribers of its topic: one look-up, and one encoding shared by
    /// all of them. Called only while some WebSocket subscribes to something.
    func deliverToGateway(_ topic: [UInt8], _ body: PendingPublications.Body) {
        let (exact, everyUser) = gateway.receivers(of: topic)
        guard exact != nil || everyUser else { return }
        let frame = Codec.encodeUpdate(topic: topic, body: bytes(of: body))
        if let exact { for id in exact { deliver(frame, to: id) } }
        if everyUser {
            for id in gateway.allPresence where exact?.contains(id) != true { deliver(frame, to: id) }
        }
    }
}
