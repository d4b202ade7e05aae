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

    /// The topic of `user`'s records as one viewer may see them, `presence/<user>/<viewer>/`: with CURVE, the broker
    /// applies it to a `user` key's subscription to `presence/<user>/` and sends there what that key's user may see of
    /// a user with privacy settings (docs/privacy.md). It starts with `presence/<user>/`, so the subscriber's own
    /// filter keeps it.
    public static func presence(_ user: UserID, viewer: UserID) -> [UInt8] {
        Array("presence/\(user.rawValue)/\(viewer.rawValue)/".utf8)
    }

    /// The topic of `user`'s records for every viewer, `presence/<user>/*/`: with CURVE, the broker applies it to every
    /// `user` key's subscription to `presence/<user>/` beside the viewer's own, and sends a user without privacy
    /// settings there, once for all, while such keys follow the user.
    public static func presenceForEveryone(_ user: UserID) -> [UInt8] { Array("presence/\(user.rawValue)/*/".utf8) }

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

/// A presence message's topic as a subscriber reads it: whose records, and for whom (protocol.md §8.2).
public struct PresenceTopic: Equatable, Sendable {
    public enum Audience: Equatable, Sendable {
        /// `presence/<user>/`: the truth, for readers, operators and open access.
        case truth
        /// `presence/<user>/*/`: for every viewer (the user has no privacy settings).
        case everyone
        /// `presence/<user>/<viewer>/`: what that viewer may see.
        case viewer(UserID)
    }

    public let user: UserID
    public let audience: Audience

    public init(user: UserID, audience: Audience) {
        self.user = user
        self.audience = audience
    }

    /// Reads a received topic; `nil` for anything that is not a presence topic.
    public init?(_ bytes: some Collection<UInt8>) {
        guard let text = String(validating: bytes, as: UTF8.self), text.hasPrefix(Topic.presencePrefix),
            text.hasSuffix("/")
        else { return nil }
        let parts = text.dropFirst(Topic.presencePrefix.count).dropLast().split(
            separator: "/", omittingEmptySubsequences: false)
        guard let user = parts.first.flatMap({ UserID(validating: String($0)) }) else { return nil }
        switch parts.count {
        case 1: audience = .truth
        case 2 where parts[1] == "*": audience = .everyone
        case 2:
            guard let viewer = UserID(validating: String(parts[1])) else { return nil }
            audience = .viewer(viewer)
        default: return nil
        }
        self.user = user
    }

    /// Whether a subscriber whose key is bound to `viewer` (`nil`: a reader, an operator or open access) takes the
    /// record: every subscriber takes the truth and what is for everyone; a viewer's copy is for that viewer only
    /// (readers and operators receive every copy by ZeroMQ's prefix matching, and drop them).
    public func isFor(_ viewer: UserID?) -> Bool {
        switch audience {
        case .truth, .everyone: true
        case .viewer(let addressee): addressee == viewer
        }
    }
}
