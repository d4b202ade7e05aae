import RollCallSecurity
import ZeroMQ

/// Who may connect and what each connection may do, with CURVE (Shell/CommandEndpoint.swift): the answers to ZAP
/// requests (ZeroMQ RFC 27) from the authorized-keys table, the access of a message's `User-Id`, and the table's
/// reloads. Without CURVE there is no table, and every peer may do everything. No socket here: the loop reads the
/// ZAP socket and sends what ``zapReply(to:)`` returns.
struct CurveGate {
    /// The keys that may connect and their roles (`nil`: no CURVE). SIGHUP replaces it.
    private(set) var keys: AuthorizedKeys?
    /// The peer addresses (IP, as ZAP gives it, without a port) each key completed a ZAP check from, since it was
    /// last listed: where a revoked key's update connections may be (``Reload``). Up to ``maxAddressesPerKey`` a key.
    private(set) var addresses: [CurveKey: Set<String>] = [:]
    /// Keys seen from more addresses than are remembered: their update connections may be anywhere.
    private(set) var seenEverywhere: Set<CurveKey> = []
    /// How many addresses are remembered per key.
    static let maxAddressesPerKey = 256

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
    /// The key's peer address is remembered (``addresses``).
    mutating func zapReply(to request: [[UInt8]]) -> ZapAnswer {
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
        remember(String(decoding: request[3], as: UTF8.self), of: key)
        return ZapAnswer(reply: [version, id, Array("200".utf8), Array("OK".utf8), Array(text.utf8), []])
    }

    /// What the connection a message came on may do: everything without CURVE; with CURVE, what its key's role in
    /// the current table allows, or nothing if the key has been removed since it connected.
    func access(userID: String?) -> Access {
        guard let keys else { return .open }
        guard let userID, let key = CurveKey(userID), let role = keys.role(of: key) else { return .revoked }
        return .role(role)
    }

    /// What a reload changed: how many keys were added, which were removed or given another role, and where they
    /// connected from.
    struct Reload: Equatable {
        var added: Int
        /// The keys removed, in the order of their text.
        var removed: [CurveKey]
        /// The keys kept with another role (a reader made a user, a user bound to another user), in the order of
        /// their text: the subscriptions libzmq applied for the old role cannot be taken back, so their update
        /// connections close too (their sessions and command connections stay; a request takes the new role).
        var rebound: [CurveKey] = []
        /// The peer addresses the removed and rebound keys passed a ZAP check from.
        var addresses: Set<String>
        /// Whether such a key was seen from more addresses than are remembered: any address may be its.
        var anyAddress: Bool

        /// Whether an update connection from `address` may be a removed or rebound key's; one whose address cannot
        /// be read (`nil`) may be anyone's, and is.
        func mayBeRevoked(address: String?) -> Bool {
            guard !removed.isEmpty || !rebound.isEmpty else { return false }
            guard let address else { return true }
            return anyAddress || addresses.contains(address)
        }
    }

    /// Takes a reloaded table; what changed. Without CURVE a table is not taken (`nil`).
    mutating func replace(with new: AuthorizedKeys) -> Reload? {
        guard let before = keys?.roles else { return nil }
        keys = new
        let removed = before.keys.filter { new.roles[$0] == nil }.sorted { $0.z85 < $1.z85 }
        var reload = Reload(
            added: new.roles.keys.filter { before[$0] == nil }.count, removed: removed, addresses: [],
            anyAddress: false)
        for key in removed {
            reload.addresses.formUnion(addresses.removeValue(forKey: key) ?? [])
            if seenEverywhere.remove(key) != nil { reload.anyAddress = true }
        }
        reload.rebound = before.filter { key, role in new.roles[key].map { $0 != role } ?? false }.keys.sorted {
            $0.z85 < $1.z85
        }
        for key in reload.rebound {
            reload.addresses.formUnion(addresses[key] ?? [])
            if seenEverywhere.contains(key) { reload.anyAddress = true }
        }
        return reload
    }

    private mutating func remember(_ address: String, of key: CurveKey) {
        guard !seenEverywhere.contains(key) else { return }
        guard addresses[key, default: []].insert(address).inserted else { return }
        if addresses[key]!.count > Self.maxAddressesPerKey {
            addresses[key] = nil
            seenEverywhere.insert(key)
        }
    }
}
