import RollCallCore
import RollCallSecurity
import RollCallWire

/// What the doors hand the loop besides ROUTER requests: subscriptions on the update socket, WebSocket frames and
/// closes (posted by BrokerGateway.swift), and reloads of CURVE keys (SIGHUP).
extension EventLoop {
    /// Reads subscription changes on the update socket (UpdateEndpoint.swift) and sends the last values due now.
    func handleSubscriptions() throws {
        let replays = try updates.readSubscriptions(
            batch: Self.batch, now: clock.now(), monotonic: signals.beat.now,
            access: { commands.access(userID: $0) }, isMember: { machine.isMember($0, of: $1) })
        for topic in replays { replay(topic) }
    }

    /// Answers one frame of a WebSocket connection (WebSocketSide.swift), and sends the last values due now.
    func answerGateway(_ request: Result<GatewayRequest, RequestRejection>, from id: ConnectionID) {
        let replays = webSockets.answer(
            request, from: id, limits: (configuration.maxReplyBytes, configuration.webSocket.maxSubscriptions),
            run: { counted($0.request, connection: id, access: $1, awaited: ($0.id, .webSocket(id))) },
            core: { machine.published }, now: clock.now())
        for topic in replays where updates.requestReplay(topic, monotonic: signals.beat.now) { replay(topic) }
    }

    /// A WebSocket resume (`subscribe` with `after`, docs/history.md) in its turn: the file is read on the reader
    /// thread, the connection held until the answer (its later requests wait). The topics are subscribed when the
    /// read is back, and the transitions published meanwhile, kept by the loop, follow what was read: nothing missing,
    /// nothing twice, and nothing on the loop but a look at what it holds.
    func startResume(
        _ requestID: JSON?, topics: [Topic], after: UInt64, logEpoch: String?, id: ConnectionID
    ) -> TurnOutcome {
        let refuse = { (error: PresenceError) -> TurnOutcome in
            self.metrics.request(nil, failed: error.code)
            self.send(Codec.encodeReply(id: requestID, .failure(error)), route: .webSocket(id))
            return .done
        }
        guard let store else { return refuse(StoreSide.noResume) }
        if let refusal = webSockets.subscriptionRefusal(
            of: topics, for: id, maxTopics: configuration.webSocket.maxSubscriptions, core: machine.published)
        {
            if refusal.code == .forbidden { metrics.refusedSubscription() }
            return refuse(refusal)
        }
        switch store.prepareResume(
            of: topics, after: after, logEpoch: logEpoch, key: .webSocket(id), machine: &machine, now: clock.now())
        {
        case .refused(let error): return refuse(error)
        case .full: return .full
        case .waitsForLog: return .waitsForLog
        case .ready(let read):
            let mailbox = signals.mailbox
            store.submitResume(read) { rows in
                mailbox.post { loop in
                    guard let store = loop.store else { return }
                    for key in store.readFinished() + [.webSocket(id)] { loop.requests.release(key) }
                    let missed = store.finishResume(read, rows, machine: &loop.machine, now: loop.clock.now())
                    let replays = loop.webSockets.resumed(
                        id, to: topics, requestID: requestID, missed: missed,
                        maxTopics: loop.configuration.webSocket.maxSubscriptions, core: loop.machine.published,
                        now: loop.clock.now())
                    for topic in replays where loop.updates.requestReplay(topic, monotonic: loop.signals.beat.now) {
                        loop.replay(topic)
                    }
                }
            }
            return .reading
        }
    }

    /// A WebSocket connection closed, or the loop closes it: its queued writes still count (a bye behind a large read),
    /// its reads and subscriptions go, its sessions end by the close path. `revoked` (its token's key went): closed
    /// first with 4003, so nothing reaches it any more, not even its writes' replies; its sessions end now, `revoked`.
    func closeGatewayConnection(_ id: ConnectionID, revoked: Bool = false) {
        guard webSockets.access(of: id) != nil else { return }
        if revoked { webSockets.close(id, code: GatewayCloseCode.tokenRevoked, reason: "token revoked") }
        finishQueuedWrites(.webSocket(id))
        webSockets.remove(id)
        guard revoked else {
            let users = machine.connectionClosed(id, now: clock.now())
            carryOutEffects()
            return logger.debug("websocket closed", metadata: ["connection": "\(id)", "users": "\(users)"])
        }
        let ended = machine.revoke([id], now: clock.now())
        carryOutEffects()
        logger.notice(
            "websocket token revoked: its sessions ended (reason revoked) and the connection closed (4003)",
            metadata: ["connection": "\(id)", "sessions_ended": "\(ended)"])
    }

    /// Takes a reloaded table of CURVE keys, and ends what the keys it removed hold (docs/security.md, "Rotate keys"):
    /// their update connections are shut down first (UpdateEndpoint.swift), then their sessions end, reason `revoked`,
    /// and the command connections their requests came on are shut down. libzmq then sees end-of-file on each and
    /// closes it itself; the key cannot connect again (ZAP refuses it). A key given another role loses its update
    /// connections alone, and subscribes again under the new role when its SUB reconnects.
    func replace(authorizedKeys keys: AuthorizedKeys) {
        guard let reload = commands.replace(authorizedKeys: keys), !reload.removed.isEmpty || !reload.rebound.isEmpty
        else { return }
        // The pending connection events first: a descriptor still known then is the connection it names (libzmq
        // reports a close before it closes the descriptor, ConnectionTracker.swift).
        try? handleConnectionEvents()
        _ = try? updates.noteDisconnects()
        updates.shutDownConnections(revokedBy: reload)
        for key in reload.removed {
            let (ids, closed) = commands.shutDownConnections(of: key)
            let ended = machine.revoke(ids, now: clock.now())
            carryOutEffects()
            logger.notice(
                "key revoked: its sessions ended (reason revoked) and its command connections closed",
                metadata: ["key": "\(key)", "sessions_ended": "\(ended)", "command_connections_closed": "\(closed)"])
        }
    }
}
