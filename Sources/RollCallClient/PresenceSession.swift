import Foundation
import RollCallClientCore
import RollCallCore
import RollCallWire
import Synchronization
import ZeroMQ

/// A session that keeps itself alive through broker restarts and outages, over ZeroMQ.
///
/// It says hello when made, then its own thread follows ``SessionMachine``'s rules: heartbeats at the interval the
/// broker asked for, status changes at once; on `unknown_session` (the broker restarted, or the session expired) a
/// new hello with the status the application last asked for; when the broker does not answer, capped, jittered
/// exponential backoff from one second, keeping the latest status change for when it answers again. Closing says
/// bye.
///
/// Given several command endpoints (the nodes of a cluster, or brokers that stand in for each other), it fails
/// over: when the node it is on does not answer within the deadline, answers `cluster_unavailable`, or its
/// connection ends (the node's process died: noticed at once, not at the next heartbeat), the session moves to the
/// next endpoint and says hello there, with the same user and device and the status asked for last. Only when every
/// endpoint has failed in a row does it wait for the backoff (``EndpointRotation``). The session on the node left
/// behind is not closed: it ends there by its TTL (or, in a cluster, with the node's lease).
public final class PresenceSession: Sendable {
    /// Where the session stands.
    public typealias State = SessionMachine.Phase

    /// The session's rules (``SessionMachine``) behind a lock: the application's thread tells it of status changes
    /// and closing, the session's thread drives it.
    private let machine: Mutex<SessionMachine>
    /// The session the broker granted first.
    public let granted: PresenceCore.Granted
    /// The command endpoints the session may use, in the order they are tried.
    public let endpoints: [String]
    private let waker: Waker
    private let finished = DispatchSemaphore(value: 0)
    private let onState: (@Sendable (State) -> Void)?
    private let start = ContinuousClock.now

    /// Says hello over a new connection to `endpoint` (failing if the broker does not answer) and starts the
    /// session's thread. `onState` is called on that thread whenever the state changes.
    public convenience init(
        endpoint: String, hello: PresenceCore.Hello, timeoutMilliseconds: Int = 3_000,
        credentials: CurveCredentials? = nil, context: Context? = nil, onState: (@Sendable (State) -> Void)? = nil
    ) throws {
        try self.init(
            endpoints: [endpoint], hello: hello, timeoutMilliseconds: timeoutMilliseconds, credentials: credentials,
            context: context, onState: onState)
    }

    /// Says hello to the first of `endpoints` (at least one) that answers, trying each once in order (failing if
    /// none does), and starts the session's thread, which fails over between them. `onState` is called on that
    /// thread whenever the state changes; ``endpoint`` then says where the session is.
    public init(
        endpoints: [String], hello: PresenceCore.Hello, timeoutMilliseconds: Int = 3_000,
        credentials: CurveCredentials? = nil, context: Context? = nil, onState: (@Sendable (State) -> Void)? = nil
    ) throws {
        let context = try context ?? .shared()
        let client = try CommandClient(
            endpoints: endpoints, timeoutMilliseconds: timeoutMilliseconds, credentials: credentials, context: context)
        granted = try client.hello(hello)
        client.failsOver = false
        self.endpoints = endpoints
        machine = Mutex(
            SessionMachine(
                hello: hello, granted: granted, now: 0,
                endpoints: EndpointRotation(count: endpoints.count, current: client.endpointIndex)))
        self.onState = onState
        let (waker, wakeSocket) = try Waker.make(context: context, name: "session-\(granted.session.rawValue)")
        self.waker = waker
        let handOff = HandOff((client, wakeSocket))
        Thread { [self] in
            let (client, wakeSocket) = handOff.take()
            run(client: client, wake: wakeSocket)
        }.start()
    }

    /// Sets the session's status and text; sent at once, or as soon as the broker answers again.
    public func setStatus(_ status: Status, text: String? = nil) {
        machine.withLock { $0.setStatus(status, text: text) }
        waker.wake()
    }

    public var state: State { machine.withLock { $0.phase } }

    /// The session the broker granted last: after a fail-over, the one on the node the session moved to.
    public var session: SessionID { machine.withLock { $0.granted.session } }

    /// The command endpoint the session is on (or, while it moves, is trying).
    public var endpoint: String { endpoints[machine.withLock { $0.endpoint }] }

    /// The last failure a call met, if any: a refusal, or why the broker did not answer.
    public var lastError: SessionMachine.Failure? { machine.withLock { $0.lastError } }

    /// Says bye (if the broker answers) and stops. Returns once that is done. Not from `onState`, which runs on the
    /// session's own thread: it would wait for itself.
    public func close() {
        machine.withLock { $0.close() }
        waker.wake()
        finished.wait()
        finished.signal()  // a second close returns at once
        waker.close()
    }

    /// Monotonic milliseconds since the session began: the machine's clock.
    private var now: Int64 {
        let elapsed = ContinuousClock.now - start
        return elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000
    }

    /// The session's thread: carries out what the machine asks, one call at a time.
    private func run(client: CommandClient, wake: Socket) {
        defer { finished.signal() }
        // With somewhere else to go, a connection that ends is a failure of its node, seen at once; with one endpoint
        // the next call finds out, and libzmq reconnects meanwhile.
        let watchConnection = endpoints.count > 1
        var reported = state
        while true {
            let (action, endpoint) = machine.withLock { ($0.next(now: now), $0.endpoint) }
            switch action {
            case .stop:
                report(&reported)
                return
            case .sleep(let until):
                do {
                    var poller = Poller(watchConnection ? [wake, client.connectionEvents] : [wake])
                    _ = try poller.poll(timeout: Int(max(0, until - now)))
                    try wake.drain()
                    if watchConnection && client.connectionEnded() {
                        machine.withLock { $0.connectionLost(now: now) }
                        report(&reported)
                    }
                } catch {
                    // The wake socket failed: the context is ending. Stop waiting, stop the session.
                    machine.withLock { $0.close() }
                }
            case .send(let request, let reconnectFirst):
                // A failure keeps the old connection.
                if reconnectFirst { try? client.reconnect(toEndpointAt: endpoint) }
                let outcome = perform(request, on: client)
                machine.withLock { $0.completed(outcome, now: now) }
                report(&reported)
            }
        }
    }

    /// Makes one call and says how it ended.
    private func perform(_ request: Request, on client: CommandClient) -> SessionMachine.Outcome {
        do {
            if case .hello(let hello) = request { return .granted(try client.hello(hello)) }
            _ = try client.call(request)
            return .accepted
        } catch let error as ClientError where error.isNodeFailure {
            // No answer in time, or a node that cannot take sessions now (`cluster_unavailable`): the same to the
            // machine, which moves on to the next endpoint if there is one.
            return .unanswered(reason: "\(error)")
        } catch ClientError.rejected(let error) {
            return .refused(error)
        } catch {
            return .unanswered(reason: "\(error)")
        }
    }

    private func report(_ reported: inout State) {
        let current = state
        guard current != reported else { return }
        reported = current
        onState?(current)
    }
}
