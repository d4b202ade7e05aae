import RollCallCore
import RollCallWire
import ZeroMQ

/// Follows users' topics on the update endpoint (a SUB socket). Belongs to one thread.
public final class PresenceSubscriber {
    public let endpoint: String
    private let context: Context
    private let socket: Socket
    /// The user a `user` key is bound to: ``next(timeout:)`` drops copies of records addressed to other viewers.
    public let viewer: UserID?

    /// Connects to `endpoint`, with CURVE when given `credentials`; `viewer` is the user a `user` key is bound to
    /// (protocol §8.2).
    public init(endpoint: String, credentials: CurveCredentials? = nil, viewer: UserID? = nil) throws {
        self.endpoint = endpoint
        self.viewer = viewer
        context = try Context()
        socket = try Socket(context, .sub)
        try socket.set(.linger(milliseconds: 0))
        try credentials?.apply(to: socket)
        try socket.connect(endpoint)
    }

    /// Follows one user; the broker answers with the user's current record.
    public func subscribe(_ user: UserID) throws { try socket.set(.subscribe(Topic.presence(user).bytes)) }

    /// Follows every user (no current records are sent for this one: use `query`).
    public func subscribeAll() throws { try socket.set(.subscribe(Topic.allPresence.bytes)) }

    public func unsubscribe(_ user: UserID) throws { try socket.set(.unsubscribe(Topic.presence(user).bytes)) }

    /// Subscribes to any prefix, such as `group/team/` or `broker/`.
    public func subscribe(prefix: [UInt8]) throws { try socket.set(.subscribe(prefix)) }

    /// The next message on any topic followed, as its topic and body, or `nil` if none arrives within `timeout`
    /// milliseconds.
    public func nextMessage(timeout milliseconds: Int) throws -> (topic: String, body: [UInt8])? {
        let deadline = Deadline(milliseconds: milliseconds)
        var poller = Poller([socket])
        while true {
            while let (frames, _) = try socket.receiveMessage() {
                guard frames.count == 2 else { continue }
                return (String(decoding: frames[0].bytes, as: UTF8.self), frames[1].bytes)
            }
            guard let remaining = deadline.remaining, try poller.poll(timeout: remaining)[0] else { return nil }
        }
    }

    /// The next record, or `nil` if none arrives within `timeout` milliseconds. Messages that are not records
    /// (of other topics, another viewer's copies, or malformed) are skipped.
    public func next(timeout milliseconds: Int) throws -> PresenceRecord? {
        let deadline = Deadline(milliseconds: milliseconds)
        var poller = Poller([socket])
        while true {
            while let (frames, _) = try socket.receiveMessage() {
                guard frames.count == 2, ReceivedTopic(frames[0].bytes)?.isFor(viewer) == true,
                    let record = try? Codec.decodeRecord(frames[1].bytes)
                else { continue }
                return record
            }
            guard let remaining = deadline.remaining, try poller.poll(timeout: remaining)[0] else { return nil }
        }
    }
}
