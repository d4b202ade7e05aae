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

    /// Whether the topic is one user's or one group's, which a `user` key follows through the forms below.
    public var hasViewerForms: Bool {
        switch self {
        case .presence, .group: true
        case .allPresence, .broker: false
        }
    }

    /// The form of a user's or group's topic for one viewer, `presence/<user>/<viewer>/` or `group/<id>/<viewer>/`:
    /// with CURVE, the broker applies it to a `user` key's subscription to the topic and sends there what that key's
    /// user may see, when it differs from what others see (docs/privacy.md). It starts with the topic, so the
    /// subscriber's own filter keeps it.
    public func copy(for viewer: UserID) -> [UInt8] { Array("\(text)\(viewer.rawValue)/".utf8) }

    /// The form of a user's or group's topic for every viewer, `presence/<user>/*/` or `group/<id>/*/`: with CURVE, the
    /// broker applies it to every `user` key's subscription to the topic beside the viewer's own, and sends there,
    /// once for all, what every key following the topic may see whole.
    public var forEveryone: [UInt8] { Array("\(text)*/".utf8) }

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

/// A received message's topic as a subscriber reads it: the topic, and for whom (protocol.md §8.2).
public struct ReceivedTopic: Equatable, Sendable {
    public enum Audience: Equatable, Sendable {
        /// The topic itself: the truth, for readers, operators and open access (and everyone, without CURVE).
        case truth
        /// The topic's `*/` form: for every viewer.
        case everyone
        /// The topic's `<viewer>/` form: what that viewer may see.
        case viewer(UserID)
    }

    public let topic: Topic
    public let audience: Audience

    public init(topic: Topic, audience: Audience) {
        self.topic = topic
        self.audience = audience
    }

    /// Reads a received topic; `nil` for anything that is not a topic of one user, one group or the broker.
    public init?(_ bytes: some Collection<UInt8>) {
        guard let text = String(validating: bytes, as: UTF8.self), text.hasSuffix("/") else { return nil }
        if text == Topic.brokerTopic {
            self.init(topic: .broker, audience: .truth)
            return
        }
        let family = [Topic.presencePrefix, Topic.groupPrefix].first { text.hasPrefix($0) }
        guard let family else { return nil }
        let parts = text.dropFirst(family.count).dropLast().split(separator: "/", omittingEmptySubsequences: false)
        guard let name = parts.first.map(String.init) else { return nil }
        let topic: Topic? =
            family == Topic.presencePrefix
            ? UserID(validating: name).map(Topic.presence) : GroupID(validating: name).map(Topic.group)
        guard let topic else { return nil }
        switch parts.count {
        case 1: self.init(topic: topic, audience: .truth)
        case 2 where parts[1] == "*": self.init(topic: topic, audience: .everyone)
        case 2:
            guard let viewer = UserID(validating: String(parts[1])) else { return nil }
            self.init(topic: topic, audience: .viewer(viewer))
        default: return nil
        }
    }

    /// Whether a subscriber whose key is bound to `viewer` (`nil`: a reader, an operator or open access) takes the
    /// message: every subscriber takes the truth and what is for everyone; a viewer's copy is for that viewer only
    /// (readers and operators receive every copy by ZeroMQ's prefix matching, and drop them).
    public func isFor(_ viewer: UserID?) -> Bool {
        switch audience {
        case .truth, .everyone: true
        case .viewer(let addressee): addressee == viewer
        }
    }
}
