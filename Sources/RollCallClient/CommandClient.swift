import Foundation
import RollCallCore
import RollCallWire
import ZeroMQ

/// A connection to the broker's command endpoint (a DEALER socket) with one call at a time. Belongs to one thread.
///
/// Given several command endpoints (nodes of a cluster), it is connected to one at a time, beginning with the first;
/// a call that goes unanswered, or that the node answers `cluster_unavailable`, is sent again to the next, once to
/// each, and the client stays where it was answered (``failsOver``).
public final class CommandClient {
    /// The command endpoints, in the order they are tried.
    public let endpoints: [String]
    /// The index in ``endpoints`` of the one connected to.
    public private(set) var endpointIndex = 0
    /// The endpoint connected to.
    public var endpoint: String { endpoints[endpointIndex] }
    /// Whether a call that goes unanswered, or is answered `cluster_unavailable`, is sent again to the next of
    /// several endpoints (once to each, so a call waits at most ``timeoutMilliseconds`` per endpoint). On by default;
    /// a ``PresenceSession`` turns it off after its first hello, since its ``SessionMachine`` chooses the endpoint.
    /// A call sent again may have been carried out by the node that did not answer in time.
    public var failsOver = true
    /// How long a call waits for its reply.
    public var timeoutMilliseconds: Int
    /// The keys for a broker that runs CURVE; `nil` for one without.
    public let credentials: CurveCredentials?
    private let context: Context
    private var socket: Socket
    private var handshakes: HandshakeWatch
    private var nextID: Int64 = 0

    /// Connects to `endpoint`, with CURVE when given `credentials`. Clients share the process's one context unless
    /// given another.
    public convenience init(
        endpoint: String, timeoutMilliseconds: Int = 3_000, credentials: CurveCredentials? = nil,
        context: Context? = nil
    ) throws {
        try self.init(
            endpoints: [endpoint], timeoutMilliseconds: timeoutMilliseconds, credentials: credentials,
            context: context)
    }

    /// Connects to the first of `endpoints` (at least one), with CURVE when given `credentials`; calls fail over to
    /// the others (``failsOver``). Clients share the process's one context unless given another.
    public init(
        endpoints: [String], timeoutMilliseconds: Int = 3_000, credentials: CurveCredentials? = nil,
        context: Context? = nil
    ) throws {
        precondition(!endpoints.isEmpty, "a CommandClient needs at least one endpoint")
        self.endpoints = endpoints
        self.timeoutMilliseconds = timeoutMilliseconds
        self.credentials = credentials
        let context = try context ?? .shared()
        self.context = context
        (socket, handshakes) = try Self.connect(endpoints[0], credentials, context, watchEnd: endpoints.count > 1)
    }

    deinit { handshakes.close() }

    /// A DEALER that queues requests only on a live connection (ZMQ_IMMEDIATE): while the broker is unreachable
    /// a request fails its call instead of waiting in a queue to be delivered, stale, after a reconnection. Its
    /// handshakes are watched, so that a refused key, or a broker that wants CURVE, is reported as such; with
    /// `watchEnd`, the end of its connection too.
    private static func connect(
        _ endpoint: String, _ credentials: CurveCredentials?, _ context: Context, watchEnd: Bool
    ) throws -> (Socket, HandshakeWatch) {
        let socket = try Socket(context, .dealer)
        try socket.set(.linger(milliseconds: 0))
        try socket.set(.immediate(true))
        try credentials?.apply(to: socket)
        let handshakes = try HandshakeWatch(
            socket, curve: credentials != nil, context: context, disconnections: watchEnd)
        try socket.connect(endpoint)
        return (socket, handshakes)
    }

    /// Drops the connection and anything queued on it, and connects again.
    public func reconnect() throws { try reconnect(toEndpointAt: endpointIndex) }

    /// Drops the connection and anything queued on it, and connects to `endpoints[index]`. A failure leaves the old
    /// connection in use.
    public func reconnect(toEndpointAt index: Int) throws {
        precondition(endpoints.indices.contains(index), "no endpoint \(index)")
        let (fresh, watch) = try Self.connect(endpoints[index], credentials, context, watchEnd: endpoints.count > 1)
        handshakes.close()  // first: it stops the monitor before the socket's teardown can send it anything
        socket.close()
        (socket, handshakes) = (fresh, watch)
        endpointIndex = index
    }

    /// The monitor socket of the connection, readable when one of its events waits: for a driver that sleeps on
    /// it to learn at once that the connection ended (``connectionEnded()``).
    var connectionEvents: Socket { handshakes.monitor }

    /// Whether the connection to the broker ended (a TCP connection closed: the broker process died, or closed it)
    /// since the last time this was asked, or since the connection was made. Watched only with several endpoints.
    func connectionEnded() -> Bool { handshakes.takeDisconnection() }

    /// The error for a call that got no answer: a refused handshake if that is why, else a timeout.
    private func unanswered(_ op: String) -> ClientError {
        handshakes.refusal() ?? .timedOut(op: op, milliseconds: timeoutMilliseconds)
    }

    /// Sends a request and waits for its reply; replies to earlier, abandoned calls are skipped. With several
    /// endpoints and ``failsOver``, a call that goes unanswered or is answered `cluster_unavailable` is sent to the
    /// next endpoint, until each has had it once; the last failure is thrown.
    public func call(_ request: Request) throws -> [JSONKey: JSON] {
        var others = failsOver ? endpoints.count - 1 : 0
        while true {
            do {
                return try callOnce(request)
            } catch let error as ClientError where others > 0 && error.isNodeFailure {
                others -= 1
                try reconnect(toEndpointAt: (endpointIndex + 1) % endpoints.count)
            }
        }
    }

    /// Makes one call on the connection in use.
    private func callOnce(_ request: Request) throws -> [JSONKey: JSON] {
        nextID += 1
        let id = JSON.number(String(nextID))
        let deadline = Deadline(milliseconds: timeoutMilliseconds)
        let body = Codec.encodeRequest(request, id: id)
        // Until the connection is up a send finds no peer (ZMQ_IMMEDIATE): wait until the socket can send.
        var writable = Poller([socket], events: .writable)
        while try !socket.send(body) {
            guard let remaining = deadline.remaining else { throw unanswered(request.op) }
            _ = try writable.poll(timeout: remaining)
        }
        var poller = Poller([socket])
        while let remaining = deadline.remaining {
            guard try poller.poll(timeout: remaining)[0] else { continue }
            while let (frames, _) = try socket.receiveMessage() {
                guard let body = frames.last?.bytes else { continue }
                let reply: Codec.ReplyBody
                do {
                    reply = try Codec.decodeReply(body)
                } catch {
                    throw ClientError.malformed("\(error)")
                }
                guard reply.id == id else { continue }
                switch reply.result {
                case .success(let fields): return fields
                case .failure(let error): throw ClientError.rejected(error)
                }
            }
        }
        throw unanswered(request.op)
    }

    /// Opens a session.
    public func hello(_ hello: PresenceCore.Hello) throws -> PresenceCore.Granted {
        try decoding { try Codec.decodeGranted(try call(.hello(hello))) }
    }

    public func heartbeat(_ session: SessionID) throws { _ = try call(.heartbeat(session: session)) }

    public func setStatus(_ session: SessionID, _ status: Status, text: String? = nil) throws {
        _ = try call(.status(session: session, status: status, text: text))
    }

    /// Holds a change of status for `after` ms (`after_ms`, docs/protocol.md §6.3): it takes effect then unless the
    /// session asks for another status or says bye first. Returns whether the broker holds it (`false`: the session
    /// already has that status and text, and any held change was cancelled).
    @discardableResult
    public func setStatus(_ session: SessionID, _ status: Status, text: String? = nil, after: Int64) throws -> Bool {
        let fields = try call(.status(session: session, status: status, text: text, afterMilliseconds: after))
        return fields[JSONKey("held")] == .bool(true)
    }

    public func bye(_ session: SessionID) throws { _ = try call(.bye(session: session)) }

    /// The current records of `users`. A reply the broker paged (`next`) is followed up to the last user.
    public func query(_ users: [UserID]) throws -> [UserID: PresenceRecord] {
        var records: [UserID: PresenceRecord] = [:]
        var rest = users[...]
        repeat {
            let fields = try call(.query(users: Array(rest)))
            let next = try decoding {
                records.merge(try Codec.decodeQuery(fields)) { $1 }
                return try Codec.decodeQueryNext(fields)
            }
            guard let next else { break }
            guard next < rest.count else { throw ClientError.malformed("a query reply's 'next' is past the users") }
            rest = rest.dropFirst(next)
        } while true
        return records
    }

    /// Defines, edits or (with an empty edit) reads a group; answers the aggregate and every member's record,
    /// reading on page by page (`after`) while the broker says more follow. Members are as of their page.
    public func group(_ group: GroupID, _ edit: GroupEdit = GroupEdit()) throws -> GroupSnapshot {
        var snapshot = try decoding { try Codec.decodeGroupSnapshot(try call(.group(group, edit))) }
        while let after = snapshot.next {
            let page = try decoding {
                try Codec.decodeGroupSnapshot(try call(.group(group, GroupEdit(), after: after)))
            }
            guard page.members.first.map({ $0.user > after }) ?? true else {
                throw ClientError.malformed("a group page must start after \(after)")
            }
            snapshot.members += page.members
            (snapshot.counts, snapshot.seq, snapshot.next) = (page.counts, page.seq, page.next)
        }
        return snapshot
    }

    /// Deletes a group; answers whether it existed.
    @discardableResult
    public func ungroup(_ group: GroupID) throws -> Bool {
        try call(.ungroup(group))["deleted"] == .bool(true)
    }

    /// Each user's record as the presence log tells it at broker time `at` (docs/history.md); one page.
    public func query(_ users: [UserID], at: BrokerTime) throws -> [UserID: PresenceRecord] {
        try decoding { try Codec.decodeQuery(try call(.queryAt(users: users, at: at))) }
    }

    /// One page of a user's transitions from the presence log (docs/history.md).
    public func history(_ query: HistoryQuery) throws -> LogPage {
        try decoding { try Codec.decodeLogPage(try call(.history(query)), name: "history") }
    }

    /// One page of every user's transitions after `after` (docs/history.md): the feed of an app's backend.
    public func events(after: UInt64, logEpoch: String? = nil, limit: Int = HistoryQuery.defaultLimit) throws
        -> LogPage
    {
        try decoding {
            try Codec.decodeLogPage(try call(.events(after: after, logEpoch: logEpoch, limit: limit)), name: "events")
        }
    }

    public func ping() throws -> BrokerInfo {
        try decoding { try Codec.decodeBrokerInfo(try call(.ping)) }
    }

    private func decoding<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as Codec.MalformedMessage {
            throw ClientError.malformed(error.description)
        }
    }
}

/// A point in time some milliseconds ahead, on the monotonic clock.
struct Deadline {
    let end: ContinuousClock.Instant

    init(milliseconds: Int) { end = .now + .milliseconds(milliseconds) }

    /// Milliseconds left, rounded up, or `nil` once passed.
    var remaining: Int? {
        let left = ContinuousClock.now.duration(to: end)
        guard left > .zero else { return nil }
        let (seconds, attoseconds) = left.components
        return Int(seconds) * 1_000 + Int((attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
    }
}
