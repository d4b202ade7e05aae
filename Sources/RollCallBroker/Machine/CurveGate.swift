import RollCallSecurity
import ZeroMQ

/// Who may connect and what each connection may do, with CURVE (EventLoop+Security.swift): the answers to ZAP
/// requests (ZeroMQ RFC 27) from the authorized-keys table, the access of a message's `User-Id`, and the table's
/// reloads. Without CURVE there is no table, and every peer may do everything. No socket here: the loop reads the
/// ZAP socket and sends what ``zapReply(to:)`` returns.
struct CurveGate {
    /// The keys that may connect and their roles (`nil`: no CURVE). SIGHUP replaces it.
    private(set) var keys: AuthorizedKeys?

    init(keys: AuthorizedKeys?) { self.keys = keys }

    /// What a ZAP request gets: the reply's frames (version, request id, status code and text, user id, metadata),
    /// and why it was refused, if it was.
    struct ZapAnswer {
        var reply: [[UInt8]]
        var refusal: String?
    }

    /// The answer to one ZAP request: a known CURVE key is accepted (200) with its Z85 text as the connection's
    /// `User-Id`, which libzmq attaches to every message of the connection; anything else is refused (400), and a
    /// request that is not ZAP 1.0 gets 500.
    func zapReply(to request: [[UInt8]]) -> ZapAnswer {
        // 1.0, request id, domain, address, routing id, mechanism, then the mechanism's credentials.
        guard request.count >= 6, request[0] == Array("1.0".utf8) else {
            let id = request.count > 1 ? request[1] : []
            return ZapAnswer(
                reply: [Array("1.0".utf8), id, Array("500".utf8), Array("malformed ZAP request".utf8), [], []],
                refusal: "malformed ZAP request")
        }
        let (version, id) = (request[0], request[1])
        func refuse(_ reason: String) -> ZapAnswer {
            ZapAnswer(reply: [version, id, Array("400".utf8), Array(reason.utf8), [], []], refusal: reason)
        }
        guard request[5] == Array("CURVE".utf8), request.count == 7, request[6].count == 32 else {
            return refuse("only CURVE is accepted")
        }
        guard let text = Curve.z85(request[6]), let key = CurveKey(text) else { return refuse("unreadable key") }
        guard keys?.role(of: key) != nil else { return refuse("key \(key) is not authorized") }
        return ZapAnswer(reply: [version, id, Array("200".utf8), Array("OK".utf8), Array(text.utf8), []])
    }

    /// What the connection a message came on may do: everything without CURVE; with CURVE, what its key's role in
    /// the current table allows, or nothing if the key has been removed since it connected.
    func access(userID: String?) -> Access {
        guard let keys else { return .open }
        guard let userID, let key = CurveKey(userID), let role = keys.role(of: key) else { return .revoked }
        return .role(role)
    }

    /// Takes a reloaded table; how many keys were added and removed. Without CURVE a table is not taken (`nil`).
    mutating func replace(with new: AuthorizedKeys) -> (added: Int, removed: Int)? {
        guard let before = keys?.roles else { return nil }
        keys = new
        return (new.roles.keys.filter { before[$0] == nil }.count, before.keys.filter { new.roles[$0] == nil }.count)
    }
}
