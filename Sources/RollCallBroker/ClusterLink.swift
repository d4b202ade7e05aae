import Dispatch
import RollCallCluster
import RollCallCore
import RollCallWire
import Synchronization

/// The loop's side of a cluster node (docs/cluster.md). The node (its own threads) keeps the lease, writes to etcd
/// and watches it; what it reports waits in ``inbox`` until the loop's next round, and the loop hands it to the
/// machine, whose cluster side (Machine/BrokerMachine+Cluster.swift) applies it to the cluster's view.
final class ClusterLink {
    let settings: ClusterSettings
    let node: ClusterNode
    let inbox: ClusterInbox

    init(settings: ClusterSettings, description: String, mailbox: LoopMailbox) {
        self.settings = settings
        let inbox = ClusterInbox()
        self.inbox = inbox
        var configuration = ClusterNode.Configuration(
            endpoints: settings.endpoints, nodeID: settings.nodeID, leaseMs: settings.leaseMilliseconds,
            keys: ClusterKeys(prefix: settings.prefix),
            requestTimeout: .milliseconds(settings.requestTimeoutMilliseconds))
        configuration.description = description
        configuration.beforeRejoin = { Self.waitForRequests(of: mailbox, timeout: .milliseconds(500)) }
        node = ClusterNode(configuration: configuration) { notification in
            inbox.append(notification)
            mailbox.wake()
        }
    }

    /// Blocks the calling thread (the node's worker, before a rejoin) until the loop has run a round of requests after
    /// the call, at most `timeout`: a job runs at the start of a round, before its requests; the one it posts runs at
    /// the start of the next, after them.
    static func waitForRequests(of mailbox: LoopMailbox, timeout: Duration) {
        let done = DispatchSemaphore(value: 0)
        mailbox.post { loop in loop.signals.mailbox.post { _ in done.signal() } }
        let (seconds, attoseconds) = timeout.components
        _ = done.wait(timeout: .now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)))
    }

    /// Hands the machine what the node reported since the last round, and what it says now (whether it may serve,
    /// measured on its monotonic clock; the cluster's seq base).
    func report(to machine: inout BrokerMachine, now: BrokerTime) {
        machine.clusterReported(
            inbox.take(), acceptsSessions: node.acceptsSessions, seqBase: node.seqBase, now: now)
    }
}

/// What the node's threads hand the loop; the loop takes it all each round.
final class ClusterInbox: Sendable {
    private let waiting = Mutex<[ClusterNode.Notification]>([])

    func append(_ notification: ClusterNode.Notification) { waiting.withLock { $0.append(notification) } }

    func take() -> [ClusterNode.Notification] { waiting.withLock { $0.isEmpty ? [] : $0.take() } }
}

extension Array {
    /// Takes the elements, leaving the array empty.
    fileprivate mutating func take() -> [Element] {
        defer { self = [] }
        return self
    }
}

/// The values the broker keeps in etcd (docs/cluster.md, "Keys"), as compact JSON.
enum ClusterValues {
    /// Why and when a user's latest session ended, as the node that held it wrote it in the user's key.
    struct Ending: Equatable {
        var reason: OfflineReason
        var time: BrokerTime
    }

    /// `{"user":…,"status":…,"text":…,"device":…,"at":…}`: a session, as its node last wrote it.
    static func encode(_ session: PresenceCore.SessionDescription, at time: BrokerTime) -> String {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("user")
        writer.string(session.user.rawValue)
        writer.key("status")
        writer.string(session.status.rawValue)
        if let text = session.text {
            writer.key("text")
            writer.string(text)
        }
        if let device = session.device {
            writer.key("device")
            writer.string(device)
        }
        writer.key("at")
        writer.integer(time.milliseconds)
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    static func decodeSession(_ value: String) -> (PresenceCore.SessionDescription, BrokerTime)? {
        guard case .object(let fields)? = try? JSONParser.parse(value),
            let user = fields["user"]?.string.flatMap(UserID.init(validating:)),
            let status = fields["status"]?.string.flatMap(Status.init(rawValue:)), let at = fields["at"]?.integer
        else { return nil }
        let session = PresenceCore.SessionDescription(
            user: user, device: fields["device"]?.string, status: status, text: fields["text"]?.string)
        return (session, BrokerTime(milliseconds: at))
    }

    /// What a node says of itself in its incarnation key, for operators reading etcd.
    static func describe(command: String, update: String, broker: String, epoch: String) -> String {
        var writer = JSONWriter()
        writer.beginObject()
        for (key, value) in [("command", command), ("update", update), ("broker", broker), ("epoch", epoch)] {
            writer.key(key)
            writer.string(value)
        }
        writer.key("version")
        writer.string(rollCallVersion)
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// `{"reason":…,"at":…}`: a user's key, written with the end of their session.
    static func encode(_ ending: Ending) -> String {
        "{\"reason\":\"\(ending.reason.rawValue)\",\"at\":\(ending.time.milliseconds)}"
    }

    static func decodeEnding(_ value: String) -> Ending? {
        guard case .object(let fields)? = try? JSONParser.parse(value),
            let reason = fields["reason"]?.string.flatMap(OfflineReason.init(rawValue:)),
            let at = fields["at"]?.integer
        else { return nil }
        return Ending(reason: reason, time: BrokerTime(milliseconds: at))
    }

    /// `{"members":[…]}`: a group's definition.
    static func encode(members: [UserID]) -> String {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("members")
        writer.beginArray()
        for member in members { writer.string(member.rawValue) }
        writer.endArray()
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// One of a user's privacy choices as its key holds it, with the time the node took the edit (the time of the
    /// records it freezes): `{"visibility":…,"last_seen":…,"at":…}` for the policy, `{"users":[…],"at":…}` for
    /// the contacts and the blocks.
    static func encode(_ field: ClusterKeys.PrivacyField, of choices: PrivacyChoices, at time: BrokerTime) -> String {
        var writer = JSONWriter()
        writer.beginObject()
        switch field {
        case .policy:
            writer.key("visibility")
            writer.string(choices.policy.visibility.rawValue)
            writer.key("last_seen")
            writer.string(choices.policy.lastSeen.rawValue)
        case .contacts, .blocks:
            writer.key("users")
            writer.beginArray()
            for user in (field == .contacts ? choices.contacts : choices.blocks).sorted() {
                writer.string(user.rawValue)
            }
            writer.endArray()
        }
        writer.key("at")
        writer.integer(time.milliseconds)
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// Reads one of a user's privacy choices into `choices`, and answers the time of the edit; `nil`, changing
    /// nothing, if the value cannot be read.
    static func decode(
        _ field: ClusterKeys.PrivacyField, _ value: String, into choices: inout PrivacyChoices
    ) -> BrokerTime? {
        guard case .object(let fields)? = try? JSONParser.parse(value), let at = fields["at"]?.integer else {
            return nil
        }
        switch field {
        case .policy:
            guard let visibility = fields["visibility"]?.string.flatMap(Audience.init(rawValue:)),
                let lastSeen = fields["last_seen"]?.string.flatMap(Audience.init(rawValue:))
            else { return nil }
            choices.policy = PrivacyPolicy(visibility: visibility, lastSeen: lastSeen)
        case .contacts, .blocks:
            guard case .array(let items)? = fields["users"] else { return nil }
            let users = items.compactMap { $0.string.flatMap(UserID.init(validating:)) }
            guard users.count == items.count else { return nil }
            if field == .contacts { choices.contacts = Set(users) } else { choices.blocks = Set(users) }
        }
        return BrokerTime(milliseconds: at)
    }

    static func decodeMembers(_ value: String) -> [UserID]? {
        guard case .object(let fields)? = try? JSONParser.parse(value), case .array(let items)? = fields["members"]
        else { return nil }
        let members = items.compactMap { $0.string.flatMap(UserID.init(validating:)) }
        return members.count == items.count ? members : nil
    }
}
