import RollCallCore

/// The topics of the update endpoint. Every topic ends with `/`, so a subscription names exactly one user.
public enum Topic: Hashable, Sendable {
    /// `presence/<user>/`: one user's records.
    case presence(UserID)
    /// `presence/`: every user's records.
    case allPresence
    /// `group/<id>/`: one group's aggregate and member changes.
    case group(GroupID)
    /// `broker/`: the broker's heartbeat.
    case broker

    public static let presencePrefix = "presence/"
    public static let groupPrefix = "group/"
    public static let brokerTopic = "broker/"

    /// The topic's bytes, the first frame of every update message.
    public var bytes: [UInt8] { Array(text.utf8) }

    public var text: String {
        switch self {
        case .presence(let user): "presence/\(user.rawValue)/"
        case .allPresence: Self.presencePrefix
        case .group(let group): "group/\(group.rawValue)/"
        case .broker: Self.brokerTopic
        }
    }

    /// Reads a topic a subscriber named; `nil` for prefixes that are no topic of ours, such as `presence/al`.
    public init?(subscription bytes: some Collection<UInt8>) {
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        if text == Self.brokerTopic {
            self = .broker
            return
        }
        if text.hasPrefix(Self.groupPrefix) {
            let rest = text.dropFirst(Self.groupPrefix.count)
            guard rest.hasSuffix("/"), let group = GroupID(validating: String(rest.dropLast())) else { return nil }
            self = .group(group)
            return
        }
        guard text.hasPrefix(Self.presencePrefix) else { return nil }
        let rest = text.dropFirst(Self.presencePrefix.count)
        if rest.isEmpty {
            self = .allPresence
            return
        }
        guard rest.hasSuffix("/"), let user = UserID(validating: String(rest.dropLast())) else { return nil }
        self = .presence(user)
    }
}
