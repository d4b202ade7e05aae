import HummingbirdWSClient
import RollCallCore
import RollCallWire

/// Follows a fixed list of users' presence over RollCall's WebSocket endpoint (docs/websocket.md), without libzmq:
/// `rollcall watch --ws`. A ``WebSocketWatch`` underneath applies the watch machine's rules (current record first,
/// the seq rule, resync, broker liveness, jittered backoff from 1 s to 30 s) until the task is cancelled, except
/// after close 4001 (the token expired), which ends ``run(onRecord:onEvent:)``.
public struct WebSocketWatcher: Sendable {
    /// What the watcher tells besides records.
    public enum Event: Sendable, Equatable {
        case connected
        /// The connection ended, with its close code if there was one; a new one is tried after `retryIn` ms.
        case lost(code: UInt16?, retryIn: Int)
    }

    public let url: String
    public let token: String?
    public let users: [UserID]
    /// Follow every user (`presence/`): operators' and readers' tokens, or a broker without tokens.
    public let all: Bool

    public init(url: String, token: String? = nil, users: [UserID], all: Bool = false) {
        self.url = url
        self.token = token
        self.users = users
        self.all = all
    }

    /// Runs until cancelled (or until the token expires), calling `onRecord` for each record of the followed users.
    public func run(
        onRecord: @escaping @Sendable (PresenceRecord) -> Void, onEvent: @escaping @Sendable (Event) -> Void = { _ in }
    ) async throws {
        let (expired, expiry) = AsyncStream<Void>.makeStream()
        let watch = WebSocketWatch(url: url, token: token) { event in
            switch event {
            case .record(let record): onRecord(record)
            case .connected: onEvent(.connected)
            case .disconnected(let code, let retryIn):
                if code == 4001 {
                    expiry.yield()
                } else {
                    onEvent(.lost(code: code, retryIn: Int(retryIn)))
                }
            case .group, .broker, .heartbeat: break
            }
        }
        if all { watch.follow(.allPresence) }
        for user in users { watch.follow(.presence(user)) }
        await withTaskCancellationHandler {
            var waiting = expired.makeAsyncIterator()
            _ = await waiting.next()
        } onCancel: {
            expiry.finish()
        }
        await watch.close()
    }

    static func subscribeRequest(_ topics: [Topic]) -> String {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("op")
        writer.string("subscribe")
        writer.key("topics")
        writer.beginArray()
        for topic in topics { writer.string(topic.text) }
        writer.endArray()
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// The record an update frame carries on a `presence/` topic; `nil` for replies and other topics.
    static func record(in frame: [UInt8]) -> PresenceRecord? {
        guard case .object(let fields)? = try? JSONParser.parse(frame),
            let topic = fields[JSONKey("topic")]?.string, topic.hasPrefix(Topic.presencePrefix),
            let message = fields[JSONKey("message")]
        else { return nil }
        return try? Codec.decodeRecord(message)
    }
}
