import RollCallCore
import RollCallSecurity
import RollCallWire

/// The WebSocket connections as the loop knows them (Shell/WebSocketSide.swift) and who subscribes to what: the
/// decisions about subscriptions (what a token may subscribe to, the cap per connection) without a socket.
struct GatewayTable {
    /// One WebSocket connection as the loop knows it.
    struct Peer {
        let outbox: GatewayOutbox
        /// What its token allows: `.open` without tokens (everything), else the token's role, checked by the same
        /// ``Authorization`` as a CURVE key's.
        var access: Access
        /// The topics it subscribes to.
        var topics: Set<[UInt8]> = []
        /// Closed for being too slow: nothing more goes to it, and it is dropped at the start of the next round.
        var dropping = false
    }

    var peers: [ConnectionID: Peer] = [:]
    /// Exact topics and the connections subscribed to each.
    private(set) var subscribers: [[UInt8]: Set<ConnectionID>] = [:]
    /// Connections subscribed to `presence/` (every user's records).
    private(set) var allPresence: Set<ConnectionID> = []
    /// Connections closed for being too slow, to drop at the start of the next round.
    var dropping: [ConnectionID] = []

    /// Whether no WebSocket connection subscribes to anything: publishing then costs nothing more.
    var hasNoSubscribers: Bool { subscribers.isEmpty && allPresence.isEmpty }

    /// Subscribes `id` to every topic of `topics` its token allows, or to none: `forbidden` if one is not allowed
    /// (a `user` token subscribes to exact topics only, and to the groups its user is a member of, per `isMember`),
    /// `limit` past `maxTopics` per connection. On success, the topics that are new for it, in the order asked (each
    /// gets its last value). `nil` for an unknown connection.
    mutating func subscribe(
        _ id: ConnectionID, to topics: [Topic], maxTopics: Int,
        isMember: (UserID, GroupID) -> Bool = { _, _ in false }
    ) -> Result<[Topic], PresenceError>? {
        guard var peer = peers[id] else { return nil }
        let new: [Topic]
        switch added(topics, to: peer, maxTopics: maxTopics, isMember: isMember) {
        case .success(let topics): new = topics
        case .failure(let error): return .failure(error)
        }
        for topic in new {
            peer.topics.insert(topic.bytes)
            if topic == .allPresence {
                allPresence.insert(id)
            } else {
                subscribers[topic.bytes, default: []].insert(id)
            }
        }
        peers[id] = peer
        return .success(new)
    }

    /// Why `id` may not subscribe to `topics` (one its token does not allow, or past `maxTopics`), or `nil`: asked
    /// before a resume reads the log, so that a refused one costs no read.
    func refusal(
        of topics: [Topic], for id: ConnectionID, maxTopics: Int, isMember: (UserID, GroupID) -> Bool
    ) -> PresenceError? {
        guard let peer = peers[id],
            case .failure(let error) = added(topics, to: peer, maxTopics: maxTopics, isMember: isMember)
        else { return nil }
        return error
    }

    /// The topics of `topics` that `peer` does not have yet, or why it may not subscribe to them.
    private func added(
        _ topics: [Topic], to peer: Peer, maxTopics: Int, isMember: (UserID, GroupID) -> Bool
    ) -> Result<[Topic], PresenceError> {
        if let refused = topics.first(where: {
            !Authorization.allowsSubscription(to: $0.bytes, by: peer.access, isMember: isMember)
        }) {
            if case .group(let group) = refused, case .role(.user(let user)) = peer.access {
                return .failure(Authorization.notMember(user, group))
            }
            return .failure(
                PresenceError(
                    .forbidden,
                    "subscribing to \(refused.text) is not allowed for this token: a user token may subscribe "
                        + "to exact topics only (presence/<user>/, group/<id>/ of its groups, broker/)"))
        }
        var new: [Topic] = []
        var seen = Set<[UInt8]>()
        for topic in topics where !peer.topics.contains(topic.bytes) && seen.insert(topic.bytes).inserted {
            new.append(topic)
        }
        guard peer.topics.count + new.count <= maxTopics else {
            return .failure(PresenceError(.limit, "a connection subscribes to at most \(maxTopics) topics"))
        }
        return .success(new)
    }

    /// Unsubscribes `id` from `topic` (nothing if it was not subscribed).
    mutating func unsubscribe(_ id: ConnectionID, from topic: [UInt8]) {
        guard peers[id]?.topics.remove(topic) != nil else { return }
        if topic == Topic.allPresence.bytes {
            allPresence.remove(id)
            return
        }
        subscribers[topic]?.remove(id)
        if subscribers[topic]?.isEmpty == true { subscribers[topic] = nil }
    }

    /// Forgets a connection and its subscriptions.
    mutating func remove(_ id: ConnectionID) {
        guard let peer = peers[id] else { return }
        for topic in peer.topics { unsubscribe(id, from: topic) }
        peers[id] = nil
    }

    /// A connection closed for being too slow: it loses its subscriptions at once, receives nothing more, and is
    /// dropped at the start of the next round.
    mutating func markDropping(_ id: ConnectionID) {
        guard let peer = peers[id], !peer.dropping else { return }
        for topic in peer.topics { unsubscribe(id, from: topic) }
        peers[id]?.dropping = true
        dropping.append(id)
    }

    /// The connections a message on `topic` goes to: its exact subscribers, and for a user's record those of every
    /// user's records, each once.
    func receivers(of topic: [UInt8]) -> (exact: Set<ConnectionID>?, everyUser: Bool) {
        (subscribers[topic], !allPresence.isEmpty && topic.first == UInt8(ascii: "p"))
    }
}
