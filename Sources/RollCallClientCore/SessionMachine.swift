import RollCallCore
import RollCallWire

/// The life of a client's session, with no sockets, threads or clock: the rules a `PresenceSession` follows over
/// any transport (ZeroMQ today), as a value that is told what happened and answers what to do next.
///
/// One request is under way at a time. The driver asks ``next(now:)`` for an ``Action``; after a `.send` it makes
/// exactly that call and reports how it ended with ``completed(_:now:)``; after a `.sleep` it waits until the time
/// given or until the application calls ``setStatus(_:text:)`` or ``close()``, then asks again.
///
/// The rules: heartbeat at the interval the broker granted; send a status change at once while the broker answers
/// (only the latest, if several were made meanwhile); on `unknown_session` (the broker restarted or let the session
/// expire) say hello again with the status asked for last; when the broker does not answer, retry with capped,
/// jittered exponential backoff, and after three failures in a row drop the connection and what is queued on it;
/// on close say bye if the broker answers, else just stop. A transport that sees its connection end (a WebSocket)
/// reports it with ``connectionLost(now:)``: the session is named again at once on a fresh connection, which renews it
/// within the broker's grace period or, if it has ended, meets `unknown_session` and says hello again. A session kept
/// alive by its connection (`idleHeartbeats: false`) sends no heartbeats while nothing else is due.
///
/// With several command endpoints (an ``EndpointRotation`` of more than one), a call that goes unanswered, or a lost
/// connection, moves the session to the next endpoint (``endpoint``) at once, on a fresh connection, with a hello
/// (the same user and device, the status asked for last): a session is one node's, so it is never named to another.
/// Only when every endpoint has failed in a row does the next attempt wait for the backoff. The driver connects to
/// the endpoint ``endpoint`` names whenever a `.send` says `reconnectFirst`.
public struct SessionMachine: Sendable {
    /// Where the session stands, as the application sees it.
    public enum Phase: Sendable, Equatable {
        /// The broker answers; the session is live.
        case live(SessionID)
        /// The broker does not answer; retrying.
        case reconnecting(attempt: Int)
        /// Closed by the application.
        case closed
    }

    /// What the driver does next.
    public enum Action: Sendable, Equatable {
        /// Make this call, then report its outcome. `reconnectFirst`: drop the connection and anything queued on it,
        /// and connect again, before sending.
        case send(Request, reconnectFirst: Bool)
        /// Nothing is due before `until` (monotonic milliseconds) unless the application asks for something.
        case sleep(until: Int64)
        /// The session is over: the driver stops.
        case stop
    }

    /// How a call ended.
    public enum Outcome: Sendable, Equatable {
        /// A heartbeat, status or bye was accepted.
        case accepted
        /// A hello was accepted with this grant.
        case granted(PresenceCore.Granted)
        /// The broker answered with an error.
        case refused(PresenceError)
        /// No answer (a timeout), or a transport failure: `reason` is kept as ``lastError``.
        case unanswered(reason: String)
    }

    /// The call under way, and which status it carries.
    private enum InFlight: Sendable, Equatable {
        case heartbeat, status(version: Int), hello(version: Int), bye
    }

    public private(set) var phase: Phase
    /// The session the broker granted last.
    public private(set) var granted: PresenceCore.Granted
    /// Why a call failed.
    public enum Failure: Sendable, Equatable, CustomStringConvertible {
        /// The broker refused it.
        case refused(PresenceError)
        /// It went unanswered (a timeout) or the transport failed.
        case unanswered(String)

        public var description: String {
            switch self {
            case .refused(let error): "\(error.code.rawValue): \(error.message)"
            case .unanswered(let reason): reason
            }
        }
    }

    /// The last failure a call met, if any.
    public private(set) var lastError: Failure?

    private let firstHello: PresenceCore.Hello
    /// The status asked for last, and its `after_ms` when the application wants it held by the broker.
    private var desired: (status: Status, text: String?, after: Int64?)
    /// The last status asked for without `after_ms`: a hello made while a held change waits says this one, so that
    /// the held change is not published at once by the hello.
    private var settled: (status: Status, text: String?)
    /// Whether a broker ever granted this session: a session started without network has not been.
    public private(set) var everGranted = true
    /// The application asked to retry at once (``reconnectNow(now:)``) while the session was live: the heartbeat
    /// that probes the connection, if unanswered, moves to a fresh connection without waiting for the backoff.
    private var probing = false
    /// The `after_ms` of the status change under way, for the driver to encode with it (`nil` for any other call).
    public private(set) var heldFor: Int64?
    /// Counts status changes, so that one made while a call is under way is not taken as sent.
    private var version = 0
    private var sentVersion = 0
    private var needsHello = false
    private var reachable = true
    private var closing = false
    private var reconnectFirst = false
    private var inFlight: InFlight?
    private var due: Int64
    private var backoff: Backoff
    private let idleHeartbeats: Bool
    private var rotation: EndpointRotation

    /// The index of the command endpoint the session is on, or moving to: the driver connects there when a `.send`
    /// says `reconnectFirst`.
    public var endpoint: Int { rotation.current }

    /// A session the broker granted at `now` to `hello`. `seed` makes the backoff's jitter repeatable in tests.
    /// `idleHeartbeats: false` for a session the broker keeps alive by its connection (`"keepalive":"connection"`):
    /// no heartbeats, only status changes, closing, and renewal after ``connectionLost(now:)``. `endpoints`: the
    /// command endpoints the session may use, `current` the one that granted it.
    public init(
        hello: PresenceCore.Hello, granted: PresenceCore.Granted, now: Int64,
        seed: UInt64 = .random(in: 1...UInt64.max),
        idleHeartbeats: Bool = true,
        endpoints: EndpointRotation = EndpointRotation(count: 1)
    ) {
        self.idleHeartbeats = idleHeartbeats
        rotation = endpoints
        firstHello = hello
        self.granted = granted
        desired = (hello.status, hello.text, nil)
        settled = (hello.status, hello.text)
        phase = .live(granted.session)
        due = idleHeartbeats ? now + granted.heartbeatMilliseconds : .max
        backoff = Backoff(seed: seed)
    }

    /// A session that no broker has granted yet, made at `now` (an app started without network): its first action
    /// is the hello, retried with the backoff until a broker answers. Until then ``phase`` is `.reconnecting` and
    /// ``granted`` holds a placeholder; closing it sends nothing.
    public init(
        hello: PresenceCore.Hello, now: Int64, seed: UInt64 = .random(in: 1...UInt64.max),
        idleHeartbeats: Bool = true, endpoints: EndpointRotation = EndpointRotation(count: 1)
    ) {
        self.init(
            hello: hello,
            granted: PresenceCore.Granted(session: SessionID(""), heartbeatMilliseconds: 1_000, ttlMilliseconds: 3_000),
            now: now, seed: seed, idleHeartbeats: idleHeartbeats, endpoints: endpoints)
        everGranted = false
        needsHello = true
        reachable = false
        phase = .reconnecting(attempt: 0)
        due = now
    }

    /// The application wants this status and text; it goes out at once while the broker answers. With
    /// `afterMilliseconds` the broker holds the change and publishes it only if the session says nothing else about
    /// its status within that time (`after_ms`, docs/protocol.md): an app going to the background.
    public mutating func setStatus(_ status: Status, text: String?, afterMilliseconds: Int64? = nil) {
        desired = (status, text, afterMilliseconds)
        if afterMilliseconds == nil { settled = (status, text) }
        version += 1
    }

    /// The network is back, or the app came to the foreground: do not wait out the backoff. A session waiting to
    /// retry tries at once (and the backoff starts over); a live one probes its connection with a heartbeat now,
    /// and if that goes unanswered moves to a fresh connection at once.
    public mutating func reconnectNow(now: Int64) {
        guard phase != .closed else { return }
        backoff.reset()
        due = min(due, now)
        if case .live = phase, reachable {
            probing = true
        } else {
            reconnectFirst = true
        }
    }

    /// The application closes the session.
    public mutating func close() { closing = true }

    /// The transport's connection ended while no call was under way: name the session at once on a fresh
    /// connection (a heartbeat, or the status change or hello that is due), which renews it within the grace period.
    /// With several endpoints it is a failure of this one: the session moves to the next (see ``EndpointRotation``).
    public mutating func connectionLost(now: Int64) {
        guard inFlight == nil else { preconditionFailure("connectionLost() while a call is under way: report it") }
        if rotation.rotates {
            failed("the connection to the broker ended", now: now)
            return
        }
        reconnectFirst = true
        due = min(due, now)
    }

    /// Whether a status change waits to be sent.
    public var statusPending: Bool { sentVersion != version }

    /// What to do at `now`.
    public mutating func next(now: Int64) -> Action {
        guard inFlight == nil else { preconditionFailure("next() while a call is under way: report it first") }
        if phase == .closed { return .stop }
        if closing {
            guard reachable, !needsHello else {
                phase = .closed
                return .stop
            }
            return send(.bye(session: granted.session), as: .bye)
        }
        // Between retries only a due attempt counts; a status change waits for it.
        guard now >= due || (statusPending && reachable) else { return .sleep(until: due) }
        if needsHello {
            var hello = firstHello
            guard desired.after != nil else {
                (hello.status, hello.text) = (desired.status, desired.text)
                return send(.hello(hello), as: .hello(version: version))
            }
            // A held change is not said by a hello, which would publish it at once: the hello says the settled
            // status, and the held change follows as a status with its `after_ms`.
            (hello.status, hello.text) = settled
            return send(.hello(hello), as: .hello(version: sentVersion))
        }
        if statusPending {
            heldFor = desired.after
            return send(
                .status(session: granted.session, status: desired.status, text: desired.text),
                as: .status(version: version))
        }
        return send(.heartbeat(session: granted.session), as: .heartbeat)
    }

    /// How the call that ``next(now:)`` asked for ended.
    public mutating func completed(_ outcome: Outcome, now: Int64) {
        guard let call = inFlight else { preconditionFailure("completed() with no call under way") }
        inFlight = nil
        heldFor = nil
        let probed = probing
        probing = false
        if call == .bye {
            phase = .closed
            return
        }
        switch (outcome, call) {
        case (.accepted, .status(let sent)), (.granted, .hello(let sent)):
            if case .granted(let grant) = outcome {
                granted = grant
                needsHello = false
                everGranted = true
            }
            answered(now: now)
            sentVersion = max(sentVersion, sent)
            phase = .live(granted.session)
        case (.accepted, _), (.granted, _):
            answered(now: now)
            phase = .live(granted.session)
        case (.refused(let error), .heartbeat) where error.code == .unknownSession,
            (.refused(let error), .status) where error.code == .unknownSession:
            // The broker restarted or let the session expire: a new session with the status asked for last, at once.
            answered(now: now)
            needsHello = true
            due = now
        case (.refused(let error), .hello) where !everGranted:
            // Never granted (a token not allowed this user, say): keep trying, with the backoff, since the app may
            // fix what is wrong (a fresh token) without making a new session.
            lastError = .refused(error)
            due = now + backoff.next()
        case (.refused(let error), .hello):
            // The broker answers but refuses this hello (its text, say): go back to the first hello's status.
            answered(now: now)
            lastError = .refused(error)
            desired = (firstHello.status, firstHello.text, nil)
            settled = (firstHello.status, firstHello.text)
            sentVersion = version
        case (.refused(let error), _):
            // Reachable, but this call was refused (a status text too long, say): drop it and keep the session;
            // sending it again would only be refused again.
            answered(now: now)
            lastError = .refused(error)
            if case .status(let sent) = call { sentVersion = max(sentVersion, sent) }
        case (.unanswered(let reason), _) where probed:
            // The probe that reconnectNow asked for went unanswered: the connection is likely dead (a phone that
            // changed networks), so a fresh one at once rather than after the backoff.
            failed(reason, now: now)
            reconnectFirst = true
            due = now
        case (.unanswered(let reason), _):
            failed(reason, now: now)
        }
    }

    /// The endpoint in use did not answer, or its connection ended.
    private mutating func failed(_ reason: String, now: Int64) {
        lastError = .unanswered(reason)
        reachable = false
        let atOnce = rotation.failed()
        if rotation.rotates {
            // Another node: a fresh connection there, and a hello, since a session belongs to the node that granted
            // it. The backoff only once every endpoint has failed in a row.
            reconnectFirst = true
            needsHello = true
            due = atOnce ? now : now + backoff.next()
        } else {
            // A late reply is skipped by its id, so one timeout keeps the connection (closing it would end the
            // session at once on a broker without grace). After three in a row a fresh one drops what is queued.
            if rotation.failures >= 3 { reconnectFirst = true }
            due = now + backoff.next()
        }
        phase = .reconnecting(attempt: rotation.failures)
    }

    private mutating func answered(now: Int64) {
        reachable = true
        rotation.answered()
        backoff.reset()
        due = idleHeartbeats ? now + granted.heartbeatMilliseconds : .max
    }

    private mutating func send(_ request: Request, as call: InFlight) -> Action {
        inFlight = call
        defer { reconnectFirst = false }
        return .send(request, reconnectFirst: reconnectFirst)
    }
}
