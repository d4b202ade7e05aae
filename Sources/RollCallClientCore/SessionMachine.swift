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
    private var desired: (status: Status, text: String?)
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
        desired = (hello.status, hello.text)
        phase = .live(granted.session)
        due = idleHeartbeats ? now + granted.heartbeatMilliseconds : .max
        backoff = Backoff(seed: seed)
    }

    /// The application wants this status and text; it goes out at once while the broker answers.
    public mutating func setStatus(_ status: Status, text: String?) {
        desired = (status, text)
        version += 1
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
            (hello.status, hello.text) = desired
            return send(.hello(hello), as: .hello(version: version))
        }
        if statusPending {
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
        if call == .bye {
            phase = .closed
            return
        }
        switch (outcome, call) {
        case (.accepted, .status(let sent)), (.granted, .hello(let sent)):
            if case .granted(let grant) = outcome {
                granted = grant
                needsHello = false
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
        case (.refused(let error), .hello):
            // The broker answers but refuses this hello (its text, say): go back to the first hello's status.
            answered(now: now)
            lastError = .refused(error)
            desired = (firstHello.status, firstHello.text)
            sentVersion = version
        case (.refused(let error), _):
            // Reachable, but this call was refused (a status text too long, say): drop it and keep the session;
            // sending it again would only be refused again.
            answered(now: now)
            lastError = .refused(error)
            if case .status(let sent) = call { sentVersion = max(sentVersion, sent) }
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

/// Capped, jittered exponential backoff: 1 s, 2 s, 4 s ... up to 30 s, each within ±20 %.
struct Backoff: Sendable {
    private(set) var attempts = 0
    var first: Int64 = 1_000
    var cap: Int64 = 30_000
    private var random: UInt64

    init(seed: UInt64) { random = seed }

    mutating func next() -> Int64 {
        let base = min(cap, first << min(Int64(attempts), 16))
        attempts += 1
        // SplitMix64: a repeatable jitter from the seed.
        random &+= 0x9E37_79B9_7F4A_7C15
        var z = random
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        let unit = Double(z >> 11) / Double(1 << 53)  // [0, 1)
        return Int64(Double(base) * (0.8 + 0.4 * unit))
    }

    mutating func reset() { attempts = 0 }
}
