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

    /// Takes a reloaded table: handshakes and messages from now on are checked against it.
    func replace(authorizedKeys keys: AuthorizedKeys) {
        guard let (added, removed) = curve.replace(with: keys) else { return }
        logger.info(
            "authorized keys replaced",
            metadata: ["keys": "\(keys.roles.count)", "added": "\(added)", "removed": "\(removed)"])
    }
}
