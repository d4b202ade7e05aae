/// Where the cluster keeps what in etcd, under one prefix (`/rollcall/v1/` by default):
///
/// | key | value | lease |
/// |---|---|---|
/// | `nodes/<node>/<incarnation>` | the node's description, written again with each of its writes (their fence) | the node's |
/// | `sessions/<node>/<incarnation>/<session>` | the session (user, status, …) | the node's |
/// | `users/<user>` | the user's last record | none |
/// | `lost/<node>/<incarnation>` | when a lost incarnation's sessions ended, stamped once (``Entry/lost(_:)``) | the writer's |
/// | `groups/<group>` | the group's definition | none |
/// | `privacy/<user>/<field>` | what the user chose (`policy`, `contacts`, `blocks`), and when (docs/privacy.md) | none |
/// | `cluster` | the cluster's `seq` base: a decimal number, written once, by the first node to join | none |
///
/// An incarnation is one run of a node: its lease id in hexadecimal. A node that restarts under the same name is a
/// new incarnation, so that the sessions of its previous run end as that run's lease ends, and never mix with its
/// new ones.
public struct ClusterKeys: Sendable, Equatable {
    public var prefix: String

    public init(prefix: String = "/rollcall/v1/") {
        self.prefix = prefix.hasSuffix("/") ? prefix : prefix + "/"
    }

    /// One run of one node.
    public struct Incarnation: Sendable, Hashable, CustomStringConvertible {
        public var node: String
        public var lease: Int64

        public init(node: String, lease: Int64) {
            self.node = node
            self.lease = lease
        }

        public var description: String { "\(node)/\(String(UInt64(bitPattern: lease), radix: 16))" }
    }

    /// A session of one incarnation; `id` is the node's own session id.
    public struct SessionKey: Sendable, Hashable, CustomStringConvertible {
        public var incarnation: Incarnation
        public var id: String

        public init(incarnation: Incarnation, id: String) {
            self.incarnation = incarnation
            self.id = id
        }

        public var description: String { "\(incarnation)/\(id)" }
    }

    /// One of a user's privacy choices: each is a key of its own, so that edits of different choices on different
    /// nodes (the backend's contacts on one, the user's policy on another) do not overwrite each other.
    public enum PrivacyField: String, Sendable, Hashable, CaseIterable {
        case policy, contacts, blocks
    }

    /// The key of one of a user's privacy choices.
    public struct PrivacyKey: Sendable, Hashable {
        public var user: String
        public var field: PrivacyField

        public init(user: String, field: PrivacyField) {
            self.user = user
            self.field = field
        }
    }

    /// What a key names.
    public enum Entry: Sendable, Hashable {
        case node(Incarnation)
        case session(SessionKey)
        case user(String)
        case group(String)
        /// One of a user's privacy choices, written whole by the node that took the edit.
        case privacy(PrivacyKey)
        /// When a lost incarnation's sessions ended: written once, by the first node to see them go, in a
        /// transaction that fails if the key exists, so that every node publishes their ends with that one time.
        case lost(Incarnation)
        /// The cluster's own settings, written once.
        case cluster
    }

    public func key(_ entry: Entry) -> String {
        switch entry {
        case .node(let incarnation): prefix + "nodes/\(incarnation)"
        case .session(let session): prefix + "sessions/\(session)"
        case .user(let user): prefix + "users/\(user)"
        case .group(let group): prefix + "groups/\(group)"
        case .privacy(let key): prefix + "privacy/\(key.user)/\(key.field.rawValue)"
        case .lost(let incarnation): prefix + "lost/\(incarnation)"
        case .cluster: prefix + "cluster"
        }
    }

    /// What `key` names, or `nil` for a key outside the layout (another version's, a stray one).
    public func entry(_ key: String) -> Entry? {
        guard key.hasPrefix(prefix) else { return nil }
        let parts = key.dropFirst(prefix.count).split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
        switch (parts.first, parts.count) {
        case ("nodes", 3):
            return incarnation(parts[1], parts[2]).map(Entry.node)
        case ("lost", 3):
            return incarnation(parts[1], parts[2]).map(Entry.lost)
        case ("sessions", 4):
            guard let incarnation = incarnation(parts[1], parts[2]), !parts[3].isEmpty else { return nil }
            return .session(SessionKey(incarnation: incarnation, id: String(parts[3])))
        case ("users", 2) where !parts[1].isEmpty:
            return .user(String(parts[1]))
        case ("groups", 2) where !parts[1].isEmpty:
            return .group(String(parts[1]))
        case ("privacy", 3) where !parts[1].isEmpty:
            return PrivacyField(rawValue: String(parts[2])).map {
                .privacy(PrivacyKey(user: String(parts[1]), field: $0))
            }
        case ("cluster", 1):
            return .cluster
        default:
            return nil
        }
    }

    private func incarnation(_ node: Substring, _ lease: Substring) -> Incarnation? {
        guard Self.isValidNodeID(String(node)), let bits = UInt64(lease, radix: 16) else { return nil }
        return Incarnation(node: String(node), lease: Int64(bitPattern: bits))
    }

    /// A node id is 1 to 64 characters of `A-Z a-z 0-9 . _ -`: it is part of keys and of log lines.
    public static func isValidNodeID(_ id: String) -> Bool {
        (1...64).contains(id.utf8.count)
            && id.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
            }
    }
}
