import Logging
import RollCallCore
import RollCallSecurity
import ZeroMQ

/// CURVE authentication (ZAP, ZeroMQ RFC 27) and who each connection is.
///
/// libzmq asks the ZAP handler about every CURVE handshake on either endpoint, with the client's public key. The
/// loop answers at once from the authorized-keys table: a known key is accepted with its Z85 text as the
/// connection's `User-Id`, which libzmq then attaches to every message from that connection; an unknown key is
/// refused with 400, and the client's handshake fails (it learns it from its socket monitor only, libzmq#3505).
/// Every request and subscription is then authorized against the key's role in the table as it is at that moment,
/// so that a reload takes effect on a connection's next message.
extension EventLoop {
    /// Answers the ZAP requests waiting: a REP socket, so each gets its reply before the next is read.
    func handleAuthentication() throws {
        guard let zap = sockets.zap else { return }
        for _ in 0..<Self.batch {
            guard let (frames, _) = try zap.receiveMessage(maxFrames: 8) else { return }
            try zap.send(message: authenticate(frames.map(\.bytes)))
        }
    }

    /// The ZAP reply to one request (Machine/CurveGate.swift); a refusal is counted and logged at most every 10 s.
    private func authenticate(_ request: [[UInt8]]) -> [[UInt8]] {
        let answer = curve.zapReply(to: request)
        if let reason = answer.refusal {
            metrics.refusedHandshake()
            if handshakeWarnings.allows(now: clock.now()) {
                let address = request.count > 3 ? String(decoding: request[3], as: UTF8.self) : "-"
                logger.warning(
                    "handshake refused (logged at most every 10 s; rollcall_handshakes_refused_total counts them)",
                    metadata: ["reason": "\(reason)", "address": "\(address)"])
            }
        } else {
            logger.debug("handshake accepted")
        }
        return answer.reply
    }

    /// What the connection a message came on may do (``CurveGate/access(userID:)``).
    func access(userID: String?) -> Access { curve.access(userID: userID) }

    /// Takes a reloaded table: handshakes and messages from now on are checked against it, and what the keys it
    /// removed hold is ended at once (``revoke(_:)``).
    func replace(authorizedKeys keys: AuthorizedKeys) {
        guard let reload = curve.replace(with: keys) else { return }
        logger.info(
            "authorized keys replaced",
            metadata: ["keys": "\(keys.roles.count)", "added": "\(reload.added)", "removed": "\(reload.removed.count)"])
        if !reload.removed.isEmpty { revoke(reload) }
    }

    /// Ends what the keys a reload removed hold (docs/security.md, "Rotate keys"):
    /// - their update connections are shut down first, before any end is published, so that they receive nothing
    ///   from the reload on. The XPUB does not say which connection a key's subscriptions came on (its messages carry
    ///   no `ZMQ_SRCFD`), so every update connection from a peer address the removed keys passed ZAP from is shut
    ///   down; an authorized subscriber from the same address reconnects and subscribes again by itself (libzmq's SUB
    ///   does), and gets each topic's last value again;
    /// - their sessions end, reason `revoked` (BrokerMachine.revoke), and the command connections their requests
    ///   came on are shut down.
    /// libzmq then sees end-of-file on each and closes it itself; the key cannot connect again (ZAP refuses it).
    func revoke(_ reload: CurveGate.Reload) {
        // Read the pending connection events first: a descriptor still known then is the connection it names
        // (libzmq reports a close before it closes the descriptor, ConnectionTracker.swift).
        do {
            try handleConnectionEvents()
            try noteSubscriberDisconnects()
        } catch {
            logger.error("reading connection events failed", metadata: ["error": "\(error)"])
        }
        var updateConnections = 0
        for descriptor in subscriberConnections.open.sorted()
        where reload.mayBeRevoked(address: ConnectionDescriptor.peerAddress(descriptor)) {
            if ConnectionDescriptor.shutDown(descriptor) { updateConnections += 1 }
        }
        let removed = Set(reload.removed.map(\.z85))
        let commandConnections = connections.connections(where: removed.contains)
        let now = clock.now()
        for key in reload.removed {
            let own = commandConnections.filter { $0.connection.userID == key.z85 }
            var closed = 0
            for (descriptor, _) in own where ConnectionDescriptor.shutDown(descriptor) { closed += 1 }
            let ended = machine.revoke(own.map(\.connection.id), now: now)
            carryOutEffects()
            logger.notice(
                "key revoked: its sessions ended (reason revoked) and its command connections closed",
                metadata: ["key": "\(key)", "sessions_ended": "\(ended)", "command_connections_closed": "\(closed)"])
        }
        logger.notice(
            """
            update connections closed from the removed keys' addresses (authorized subscribers among them reconnect \
            by themselves)
            """,
            metadata: [
                "update_connections_closed": "\(updateConnections)",
                "addresses": "\(reload.anyAddress ? "any" : reload.addresses.sorted().joined(separator: ","))",
            ])
    }
}
