import HummingbirdWSClient
import RollCallCore
import RollCallWire

/// Follows users' presence over RollCall's WebSocket endpoint (docs/websocket.md), without libzmq: for apps that
/// cannot ship it, and for `rollcall watch --ws`. Each (re)connection subscribes again, so the current record of every
/// user comes first; a connection that ends is retried with backoff (0.5 s doubling to 15 s) until the task is
/// cancelled, except after 4001 (the token expired), which ends ``run()``.
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
        var backoff = 500
        let topics = (all ? [Topic.allPresence] : []) + users.map(Topic.presence)
        let subscribe = Self.subscribeRequest(topics)
        let configuration = WebSocketClient.configuration(token: token)
        while !Task.isCancelled {
            let frame = try? await WebSocketClient.connect(
                url: url, configuration: configuration, logger: WebSocketClient.quietLogger
            ) {
                inbound, outbound, _ in
                try await outbound.write(.text(subscribe))
                onEvent(.connected)
                for try await message in inbound.messages(maxSize: 1 << 24) {
                    guard case .text(let text) = message, let record = Self.record(in: Array(text.utf8)) else {
                        continue
                    }
                    onRecord(record)
                }
            }
            let code = frame.map { UInt16(webSocketErrorCode: $0.closeCode) }
            if code == 4001 || Task.isCancelled { return }
            onEvent(.lost(code: code, retryIn: backoff))
            try await Task.sleep(for: .milliseconds(backoff))
            backoff = min(backoff * 2, 15_000)
        }
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
