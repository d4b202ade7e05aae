import Foundation
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import RollCallClientCore
import RollCallCore
import RollCallWire

/// A session that keeps itself alive through outages, over RollCall's WebSocket endpoint (docs/websocket.md), without
/// libzmq: for apps that cannot ship it, and for `rollcall online --ws`.
///
/// It says hello when made, then its own task follows ``SessionMachine``'s rules, as `PresenceSession` does over
/// ZeroMQ: heartbeats at the interval the broker asked for (none with `"keepalive":"connection"`, whose session the
/// connection keeps alive), status changes at once; on `unknown_session` a new hello with the status the application
/// last asked for; when the broker does not answer, capped, jittered exponential backoff from one second. When the
/// connection ends, a fresh one names the session at once: within the broker's grace period that renews it, after it
/// the broker answers `unknown_session` and the session says hello again. Closing says bye.
///
/// One connection carries the requests (each with an id; its reply is matched by that id) and, for the users it was
/// asked to follow, their records: each (re)connection subscribes first, so the current record of each followed user
/// comes first, then every change.
///
/// Tokens: a fixed `token` is sent on every (re)connection until it expires (then the broker closes the connection
/// with 4001 and refuses new ones with 401). With a `tokenProvider` (the app asking its backend for a fresh token) the
/// session asks it for a token before each (re)connection, and again before the token's `exp` (a quarter of its
/// lifetime before, at least 1 s and at most 60 s), which it presents on the open connection with `auth`, so that a
/// long session is never cut for an expired token.
public final class WebSocketSession: Sendable {
    /// Where the session stands.
    public typealias State = SessionMachine.Phase

    /// The session's rules behind a lock: the application tells it of status changes and closing, the session's task
    /// drives it.
    /// A lock that Apple's platforms have before iOS 18 (`Synchronization.Mutex` is iOS 18 and later).
    private let machine: NIOLockedValueBox<SessionMachine>
    private let events: AsyncStream<WebSocketLink.Event>.Continuation
    private let driver = NIOLockedValueBox<Task<Void, Never>?>(nil)
    private let onState: (@Sendable (State) -> Void)?

    /// The session the broker granted last (a placeholder until one is granted: see ``everGranted``).
    public var granted: PresenceCore.Granted { machine.withLockedValue { $0.granted } }

    /// Whether a broker has granted the session yet (a session started without network has not).
    public var everGranted: Bool { machine.withLockedValue { $0.everGranted } }

    /// Says hello over a new connection to `url` (`ws://HOST:PORT/v1/ws`), signed in with `token` if the broker checks
    /// tokens (or with what `tokenProvider` gives, asked before each connection and before each token expires),
    /// failing if the broker does not answer within `timeoutMilliseconds` or refuses; then starts the session's task.
    /// `onState` is called on that task whenever the state changes. `onRecord` is called with each record of the users
    /// in `following` (the user's own included if named), on the connection's task.
    public init(
        url: String, token: String? = nil, tokenProvider: (@Sendable () async throws -> String)? = nil,
        hello: PresenceCore.Hello, timeoutMilliseconds: Int = 3_000,
        following users: [UserID] = [], onRecord: (@Sendable (PresenceRecord) -> Void)? = nil,
        onState: (@Sendable (State) -> Void)? = nil
    ) async throws {
        let (stream, events) = AsyncStream<WebSocketLink.Event>.makeStream()
        let subscription = onRecord.flatMap { onRecord in
            users.isEmpty
                ? nil
                : WebSocketLink.Subscription(
                    request: WebSocketWatcher.subscribeRequest(users.map(Topic.presence)), onRecord: onRecord)
        }
        let link = WebSocketLink(
            url: url, token: token, tokenProvider: tokenProvider, timeoutMilliseconds: timeoutMilliseconds,
            subscription: subscription, events: events, stream: stream)
        let granted: PresenceCore.Granted
        switch await link.call(.hello(hello)) {
        case .granted(let grant): granted = grant
        case .refused(let error): throw error
        case .unanswered(let reason): throw WebSocketSessionError.unanswered(reason)
        case .accepted: throw WebSocketSessionError.unanswered("a hello reply without a session")
        }
        machine = NIOLockedValueBox(
            SessionMachine(
                hello: hello, granted: granted, now: link.now, idleHeartbeats: hello.keepAlive != .connection))
        self.events = events
        self.onState = onState
        let task = Task { [self] in await run(link) }
        driver.withLockedValue { $0 = task }
    }

    /// A session that starts at once, whether or not the network is there: it never throws, and its task says hello
    /// as soon as a broker answers, retrying with the backoff (``reconnectNow()`` cuts the wait). `state` is
    /// `.reconnecting` until then. Otherwise the same as the throwing initializer.
    public init(
        startingWithoutWaiting url: String, token: String? = nil,
        tokenProvider: (@Sendable () async throws -> String)? = nil, hello: PresenceCore.Hello,
        timeoutMilliseconds: Int = 3_000, onState: (@Sendable (State) -> Void)? = nil
    ) {
        let (stream, events) = AsyncStream<WebSocketLink.Event>.makeStream()
        let link = WebSocketLink(
            url: url, token: token, tokenProvider: tokenProvider, timeoutMilliseconds: timeoutMilliseconds,
            subscription: nil, events: events, stream: stream)
        machine = NIOLockedValueBox(
            SessionMachine(hello: hello, now: link.now, idleHeartbeats: hello.keepAlive != .connection))
        self.events = events
        self.onState = onState
        let task = Task { [self] in await run(link) }
        driver.withLockedValue { $0 = task }
    }

    /// Sets the session's status and text; sent at once, or as soon as the broker answers again. With
    /// `afterMilliseconds` (1 to 600,000) the broker holds the change and publishes it only if this session says
    /// nothing else about its status within that time (`after_ms`, docs/protocol.md): what going to the background
    /// sends, so that coming back soon shows nothing.
    public func setStatus(_ status: Status, text: String? = nil, afterMilliseconds: Int64? = nil) {
        machine.withLockedValue { $0.setStatus(status, text: text, afterMilliseconds: afterMilliseconds) }
        events.yield(.wake)
    }

    /// The network is back: try at once instead of waiting out the backoff (a live session probes its connection
    /// with a heartbeat, and moves to a fresh one at once if that goes unanswered).
    public func reconnectNow() {
        machine.withLockedValue { $0.reconnectNow(now: WebSocketLink.clock()) }
        events.yield(.wake)
    }

    public var state: State { machine.withLockedValue { $0.phase } }

    /// Whether a status change waits for the broker's answer.
    public var statusPending: Bool { machine.withLockedValue { $0.statusPending } }

    /// The last failure a call met, if any: a refusal, or why the broker did not answer.
    public var lastError: SessionMachine.Failure? { machine.withLockedValue { $0.lastError } }

    /// Says bye (if the broker answers), closes the connection and stops. Returns once that is done. Not from
    /// `onState`, which runs on the session's own task: it would wait for itself.
    public func close() async {
        machine.withLockedValue { $0.close() }
        events.yield(.wake)
        await driver.withLockedValue { $0 }?.value
    }

    /// The session's task: carries out what the machine asks, one call at a time.
    private func run(_ link: WebSocketLink) async {
        defer { link.disconnect() }
        var reported = state
        while true {
            let (action, heldFor) = machine.withLockedValue { ($0.next(now: link.now), $0.heldFor) }
            switch action {
            case .stop:
                report(&reported)
                return
            case .sleep(let until):
                if case .ended = await link.wait(until: until) {
                    machine.withLockedValue { $0.connectionLost(now: link.now) }
                }
            case .send(let request, let reconnectFirst):
                if reconnectFirst { link.disconnect() }
                let outcome = await link.call(request, afterMilliseconds: heldFor)
                machine.withLockedValue { $0.completed(outcome, now: link.now) }
                report(&reported)
            }
        }
    }

    private func report(_ reported: inout State) {
        let current = state
        guard current != reported else { return }
        reported = current
        onState?(current)
    }
}

/// Why a ``WebSocketSession`` could not begin.
public enum WebSocketSessionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The first hello got no answer, or the connection failed.
    case unanswered(String)

    public var description: String {
        switch self {
        case .unanswered(let reason): "no answer to hello: \(reason)"
        }
    }
}

/// The session's connection, owned by its task: one WebSocket at a time, made when a call needs one, whose replies are
/// matched to requests by id. Everything it hears (frames, its end, timers, the application's wake-ups) comes through
/// one stream, read only here.
final class WebSocketLink {
    enum Event: Sendable {
        /// The application changed the status or closed the session.
        case wake
        /// A text frame on connection `generation`.
        case frame(generation: Int, bytes: [UInt8])
        /// Connection `generation` ended.
        case ended(generation: Int, reason: String)
        /// Timer `token` fired.
        case timer(token: Int)
    }

    /// Sent first on every connection; the records it brings go to `onRecord`.
    struct Subscription: Sendable {
        let request: String
        let onRecord: @Sendable (PresenceRecord) -> Void
    }

    /// What ``wait(until:)`` saw.
    enum Wakening { case woken, timedOut, ended }

    private struct Connection {
        let generation: Int
        let outgoing: AsyncStream<String?>.Continuation
    }

    let url: String
    /// The token sent with the next connection's upgrade.
    private var token: String?
    /// Gives a fresh token before each connection and before the current one expires.
    let tokenProvider: (@Sendable () async throws -> String)?
    /// When (the link's clock) to present a fresh token on the open connection; `.max`: never.
    private var refreshAt: Int64 = .max
    /// The application woke the session while a token was being presented: ``wait(until:)`` says so next.
    private var wokenMeanwhile = false
    let timeoutMilliseconds: Int
    let subscription: Subscription?
    private let events: AsyncStream<Event>.Continuation
    private var stream: AsyncStream<Event>.Iterator
    private var connection: Connection?
    private var generation = 0
    private var nextID: Int64 = 0
    private var timers = 0
    /// Every link's clock starts at the same instant, so that the application's thread can read it too
    /// (``WebSocketSession/reconnectNow()``).
    private static let epoch = ContinuousClock.now

    init(
        url: String, token: String?, tokenProvider: (@Sendable () async throws -> String)?, timeoutMilliseconds: Int,
        subscription: Subscription?, events: AsyncStream<Event>.Continuation, stream: AsyncStream<Event>
    ) {
        self.url = url
        self.token = token
        self.tokenProvider = tokenProvider
        self.timeoutMilliseconds = timeoutMilliseconds
        self.subscription = subscription
        self.events = events
        self.stream = stream.makeAsyncIterator()
    }

    deinit { disconnect() }

    /// Monotonic milliseconds since the link was made: the machine's clock.
    var now: Int64 { Self.clock() }

    /// Monotonic milliseconds since the first link of the process was made.
    static func clock() -> Int64 {
        let elapsed = ContinuousClock.now - epoch
        return elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000
    }

    /// Makes one call (connecting first if there is no connection) and says how it ended.
    func call(_ request: Request, afterMilliseconds: Int64? = nil) async -> SessionMachine.Outcome {
        let current: Connection
        if let connection {
            current = connection
        } else {
            current = await connect()
        }
        nextID += 1
        let id = JSON.number(String(nextID))
        current.outgoing.yield(String(decoding: Self.encode(request, id: id, afterMilliseconds), as: UTF8.self))
        let deadline = now + Int64(timeoutMilliseconds)
        while true {
            switch await next(until: deadline) {
            case nil:
                return .unanswered(reason: "no answer to \(request.op) within \(timeoutMilliseconds) ms")
            case .ended(let ended, let reason) where ended == current.generation:
                connection = nil
                return .unanswered(reason: reason)
            case .frame(let from, let bytes) where from == current.generation:
                // Updates have no `ok` and do not decode as replies; replies to abandoned calls have other ids.
                guard let reply = try? Codec.decodeReply(bytes), reply.id == id else { continue }
                switch reply.result {
                case .failure(let error): return .refused(error)
                case .success(let fields):
                    guard case .hello = request else { return .accepted }
                    guard let grant = try? Codec.decodeGranted(fields) else {
                        return .unanswered(reason: "a hello reply without session, heartbeat_ms and ttl_ms")
                    }
                    return .granted(grant)
                }
            default:
                continue
            }
        }
    }

    /// The request's JSON, with `after_ms` added to a held status change. Added here rather than by the shared codec,
    /// whose `Request` is the broker's too: once `Request.status` carries the hold itself (the broker's `after_ms`
    /// change), the session machine can put it there and this goes.
    static func encode(_ request: Request, id: JSON, _ afterMilliseconds: Int64?) -> [UInt8] {
        var bytes = Codec.encodeRequest(request, id: id)
        guard case .status = request, let afterMilliseconds, bytes.last == UInt8(ascii: "}"),
            !bytes.contains(Array("\"after_ms\"".utf8))
        else { return bytes }
        bytes.removeLast()
        bytes += Array(",\"after_ms\":\(afterMilliseconds)}".utf8)
        return bytes
    }

    /// Waits until `until` (monotonic milliseconds), a wake-up, or the end of the current connection.
    func wait(until: Int64) async -> Wakening {
        while true {
            if wokenMeanwhile {
                wokenMeanwhile = false
                return .woken
            }
            let refreshing = connection != nil && refreshAt < until
            switch await next(until: refreshing ? refreshAt : until) {
            case nil:
                guard refreshing else { return .timedOut }
                await refreshToken()
            case .wake: return .woken
            case .ended(let ended, _) where ended == connection?.generation:
                connection = nil
                return .ended
            default: continue
            }
        }
    }

    /// Asks the provider for a fresh token and presents it on the open connection (`auth`); on a failure, tries again
    /// in 5 s (the connection is closed with 4001 at the old token's `exp`, and the next one asks the provider again).
    private func refreshToken() async {
        refreshAt = .max
        guard let tokenProvider, let current = connection else { return }
        let fresh: String
        do {
            fresh = try await tokenProvider()
        } catch {
            refreshAt = now + 5_000
            return
        }
        nextID += 1
        let id = JSON.number(String(nextID))
        current.outgoing.yield(#"{"op":"auth","id":\#(nextID),"token":"\#(fresh)"}"#)
        let deadline = now + Int64(timeoutMilliseconds)
        while true {
            switch await next(until: deadline) {
            case nil:
                refreshAt = now + 5_000
                return
            case .wake:
                wokenMeanwhile = true
            case .ended(let ended, let reason) where ended == current.generation:
                // Put back for ``wait(until:)`` to see.
                events.yield(.ended(generation: ended, reason: reason))
                return
            case .frame(let from, let bytes) where from == current.generation:
                guard let reply = try? Codec.decodeReply(bytes), reply.id == id else { continue }
                guard case .success = reply.result else {
                    refreshAt = now + 5_000
                    return
                }
                token = fresh
                scheduleRefresh()
                return
            default:
                continue
            }
        }
    }

    /// With a provider, plans the next refresh from the current token's `exp`: a quarter of its remaining lifetime
    /// before it, at least 1 s and at most 60 s.
    private func scheduleRefresh() {
        guard tokenProvider != nil, let token, let expires = Self.expiry(of: token) else {
            refreshAt = .max
            return
        }
        // Clamped: an `exp` centuries away must not trap the conversion (a day is far enough to plan).
        let left = Int64(min(max(expires - Date().timeIntervalSince1970, 0), 86_400) * 1_000)
        refreshAt = now + max(0, left - min(60_000, max(1_000, left / 4)))
    }

    /// A JWT's `exp`, in seconds since 1970, read without checking the signature (the broker checks it).
    static func expiry(of token: String) -> Double? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64),
            let claims = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let exp = claims["exp"] as? NSNumber
        else { return nil }
        return exp.doubleValue
    }

    /// Closes the current connection, if any, with a close frame.
    func disconnect() {
        connection?.outgoing.yield(nil)
        connection?.outgoing.finish()
        connection = nil
    }

    /// The next event before `deadline`, or `nil` at the deadline; stale timers are skipped.
    private func next(until deadline: Int64) async -> Event? {
        timers += 1
        let token = timers
        let timer: Task<Void, Never>? =
            deadline == .max
            ? nil
            : Task { [events, delay = max(0, deadline - now)] in
                guard (try? await Task.sleep(for: .milliseconds(delay))) != nil else { return }
                events.yield(.timer(token: token))
            }
        defer { timer?.cancel() }
        while let event = await stream.next() {
            if case .timer(let fired) = event {
                guard fired == token else { continue }
                return nil
            }
            return event
        }
        return nil
    }

    /// Opens a new connection (with a fresh token, if there is a provider); what it hears goes to the link's stream,
    /// tagged with its generation.
    private func connect() async -> Connection {
        if let tokenProvider, let fresh = try? await tokenProvider() { token = fresh }
        scheduleRefresh()
        generation += 1
        let (outgoing, sender) = AsyncStream<String?>.makeStream()
        let fresh = Connection(generation: generation, outgoing: sender)
        connection = fresh
        if let subscription { sender.yield(subscription.request) }  // its reply has no id: no call takes it
        Task {
            [
                url, events, generation, onRecord = subscription?.onRecord,
                configuration = WebSocketClient.configuration(token: token)
            ] in
            var reason = "the connection to \(url) closed"
            do {
                let frame = try await WebSocketClient.connect(
                    url: url, configuration: configuration, logger: WebSocketClient.quietLogger
                ) { inbound, outbound, _ in
                    try await WebSocketPump.run(inbound: inbound, outbound: outbound, sending: outgoing) { text in
                        let bytes = Array(text.utf8)
                        if let onRecord, let record = WebSocketWatcher.record(in: bytes) {
                            onRecord(record)
                        } else {
                            events.yield(.frame(generation: generation, bytes: bytes))
                        }
                    }
                }
                if let frame { reason += " (close \(UInt16(webSocketErrorCode: frame.closeCode)))" }
            } catch {
                reason = "the connection to \(url) failed: \(error)"
            }
            events.yield(.ended(generation: generation, reason: reason))
        }
        return fresh
    }
}

/// One WebSocket connection's traffic, inside `WebSocketClient.connect`'s handler: sends the texts of `sending` as they
/// come (`nil` closes the connection with 1000) and passes each text frame received to `received`, until the
/// connection ends.
public enum WebSocketPump {
    public static func run(
        inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, sending: AsyncStream<String?>,
        received: @escaping @Sendable (String) -> Void
    ) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await text in sending {
                    guard let text else {
                        try await outbound.close(.normalClosure, reason: nil)
                        return
                    }
                    try await outbound.write(.text(text))
                }
            }
            for try await message in inbound.messages(maxSize: 1 << 24) {
                guard case .text(let text) = message else { continue }
                received(text)
            }
            group.cancelAll()
        }
    }
}

extension WebSocketClient {
    /// The client's configuration: the token, if any, as `Authorization: Bearer`.
    static func configuration(token: String?) -> WebSocketClientConfiguration {
        var configuration = WebSocketClientConfiguration()
        if let token { configuration.additionalHeaders = [.authorization: "Bearer \(token)"] }
        return configuration
    }

    /// hummingbird-websocket's own logging, silenced: the clients report what matters through their callbacks.
    static var quietLogger: Logger {
        var logger = Logger(label: "rollcall-ws-client")
        logger.logLevel = .critical
        return logger
    }
}
