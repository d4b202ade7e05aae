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

    /// The ZAP reply to one request: version, request id, status code and text, user id, metadata.
    private func authenticate(_ request: [[UInt8]]) -> [[UInt8]] {
        // 1.0, request id, domain, address, routing id, mechanism, then the mechanism's credentials.
        guard request.count >= 6, request[0] == Array("1.0".utf8) else {
            return [
                Array("1.0".utf8), request.count > 1 ? request[1] : [], Array("500".utf8),
                Array("malformed ZAP request".utf8), [], [],
            ]
        }
        let version = request[0]
        let id = request[1]
        func refuse(_ reason: String) -> [[UInt8]] {
            metrics.refusedHandshake()
            let now = clock.now()
            if handshakeWarnings.allows(now: now) {
                logger.warning(
                    "handshake refused (logged at most every 10 s; rollcall_handshakes_refused_total counts them)",
                    metadata: ["reason": "\(reason)", "address": "\(String(decoding: request[3], as: UTF8.self))"])
            }
            return [version, id, Array("400".utf8), Array(reason.utf8), [], []]
        }
        guard request[5] == Array("CURVE".utf8), request.count == 7, request[6].count == 32 else {
            return refuse("only CURVE is accepted")
        }
        guard let text = Curve.z85(request[6]), let key = CurveKey(text) else { return refuse("unreadable key") }
        guard authorizedKeys?.role(of: key) != nil else { return refuse("key \(key) is not authorized") }
        logger.debug("handshake accepted", metadata: ["key": "\(key)"])
        return [version, id, Array("200".utf8), Array("OK".utf8), Array(text.utf8), []]
    }

    /// What the connection a message came on may do: everything without CURVE; with CURVE, what its key's role in
    /// the current table allows, or nothing if the key has been removed since it connected.
    func access(userID: String?) -> Access {
        guard let authorizedKeys else { return .open }
        guard let userID, let key = CurveKey(userID), let role = authorizedKeys.role(of: key) else { return .revoked }
        return .role(role)
    }

    /// Takes a reloaded table: handshakes and messages from now on are checked against it.
    func replace(authorizedKeys keys: AuthorizedKeys) {
        guard authorizedKeys != nil else { return }
        let before = authorizedKeys?.roles ?? [:]
        let removed = before.keys.filter { keys.roles[$0] == nil }.count
        let added = keys.roles.keys.filter { before[$0] == nil }.count
        authorizedKeys = keys
        logger.info(
            "authorized keys replaced",
            metadata: [
                "keys": "\(keys.roles.count)", "added": "\(added)",
                "removed": "\(removed)",
            ])
    }
}
