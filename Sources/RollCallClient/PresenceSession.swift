import Foundation
import RollCallCore
import RollCallWire
import Synchronization
import ZeroMQ

/// A session that keeps itself alive through broker restarts and outages.
///
/// It says hello when made, then on its own thread heartbeats at the interval the broker asked for and sends status
/// changes. When the broker answers `unknown_session` (it restarted, or the session expired) it says hello again
/// with the status the application last asked for. When the broker does not answer, it retries with capped,
/// jittered exponential backoff starting at one second; status changes made meanwhile are kept (only the latest)
/// and sent once the broker answers again. Closing says bye.
public final class PresenceSession: Sendable {
    /// Where the session stands.
    public enum State: Sendable, Equatable {
        /// The broker answers; the session is live.
        case live(SessionID)
        /// The broker does not answer; retrying.
        case reconnecting(attempt: Int)
        /// Closed by the application.
        case closed
    }

    private struct Shared {
        var desired: (status: Status, text: String?)
        var statusPending = false
        /// Counts status changes, so that one made while a request is under way is not taken as sent.
        var statusVersion = 0
        var closing = false
        var state: State
        var lastError: ClientError?
    }

    /// The session the broker granted first.
    public let granted: PresenceCore.Granted
    private let shared: Mutex<Shared>
    private let waker: Waker
    private let finished = DispatchSemaphore(value: 0)
    private let onState: (@Sendable (State) -> Void)?

    /// Says hello over a new connection to `endpoint` (failing if the broker does not answer) and starts the
    /// session's thread. `onState` is called on that thread whenever the state changes.
    public init(
        endpoint: String, hello: PresenceCore.Hello, timeoutMilliseconds: Int = 3_000,
        onState: (@Sendable (State) -> Void)? = nil
    ) throws {
        let client = try CommandClient(endpoint: endpoint, timeoutMilliseconds: timeoutMilliseconds)
        granted = try client.hello(hello)
        shared = Mutex(Shared(desired: (hello.status, hello.text), state: .live(granted.session)))
        self.onState = onState
        let context = try Context()
        let (waker, wakeSocket) = try Waker.make(context: context, name: "session-\(granted.session.rawValue)")
        self.waker = waker
        let handOff = HandOff((client, wakeSocket, context, hello))
        Thread { [self] in
            let (client, wakeSocket, context, hello) = handOff.take()
            withExtendedLifetime(context) { self.run(client: client, wake: wakeSocket, hello: hello) }
        }.start()
    }

    /// Sets the session's status and text; sent at once, or as soon as the broker answers again.
    public func setStatus(_ status: Status, text: String? = nil) {
        shared.withLock {
            $0.desired = (status, text)
            $0.statusPending = true
            $0.statusVersion += 1
        }
        waker.wake()
    }

    public var state: State { shared.withLock { $0.state } }

    /// The last error a request met, if any.
    public var lastError: ClientError? { shared.withLock { $0.lastError } }

    /// Says bye (if the broker answers) and stops. Returns once that is done. Not from `onState`, which runs on the
    /// session's own thread: it would wait for itself.
    public func close() {
        shared.withLock { $0.closing = true }
        waker.wake()
        finished.wait()
        finished.signal()  // a second close returns at once
        waker.close()
    }

    private func run(client: CommandClient, wake: Socket, hello: PresenceCore.Hello) {
        defer { finished.signal() }
        var session = granted.session
        var heartbeat = Int(granted.heartbeatMilliseconds)
        var poller = Poller([wake])
        var next = Deadline(milliseconds: heartbeat)
        var backoff = Backoff()
        var reachable = true
        while true {
            _ = try? poller.poll(timeout: next.remaining ?? 0)
            try? wake.drain()
            let (desired, statusPending, version, closing) = shared.withLock {
                ($0.desired, $0.statusPending, $0.statusVersion, $0.closing)
            }
            if closing {
                if reachable { try? client.bye(session) }
                update(.closed)
                return
            }
            // Between retries only a due attempt counts; a status change waits for it.
            guard next.remaining == nil || (statusPending && reachable) else { continue }
            do {
                if statusPending {
                    try client.setStatus(session, desired.status, text: desired.text)
                    sent(version)
                } else {
                    try client.heartbeat(session)
                }
                reachable = true
                backoff.reset()
                next = Deadline(milliseconds: heartbeat)
                update(.live(session))
            } catch ClientError.rejected(let error) where error.code == .unknownSession {
                // The broker restarted or let the session expire: a new session with the status asked for last.
                var again = hello
                (again.status, again.text) = desired
                do {
                    let granted = try client.hello(again)
                    session = granted.session
                    heartbeat = Int(granted.heartbeatMilliseconds)
                    sent(version)
                    reachable = true
                    backoff.reset()
                    next = Deadline(milliseconds: heartbeat)
                    update(.live(session))
                } catch ClientError.rejected(let refused) {
                    // The broker answers but refuses this hello (its text, say): go back to the first hello's.
                    shared.withLock {
                        $0.lastError = .rejected(refused)
                        $0.desired = (hello.status, hello.text)
                        $0.statusPending = false
                    }
                    next = Deadline(milliseconds: heartbeat)
                } catch {
                    next = unreachable(error, client: client, backoff: &backoff, reachable: &reachable)
                }
            } catch ClientError.rejected(let refused) {
                // The broker answered, so it is reachable; it refused this request (a status text too long, say).
                // Drop the request and keep the session: retrying it would only be refused again.
                shared.withLock { $0.lastError = .rejected(refused) }
                sent(version)
                reachable = true
                next = Deadline(milliseconds: heartbeat)
            } catch {
                next = unreachable(error, client: client, backoff: &backoff, reachable: &reachable)
            }
        }
    }

    /// The status of `version` reached the broker: nothing is pending unless the application changed it since.
    private func sent(_ version: Int) {
        shared.withLock { if $0.statusVersion == version { $0.statusPending = false } }
    }

    /// Records a failed attempt and returns when to try again.
    private func unreachable(
        _ error: Error, client: CommandClient, backoff: inout Backoff, reachable: inout Bool
    ) -> Deadline {
        shared.withLock { $0.lastError = error as? ClientError ?? .malformed("\(error)") }
        reachable = false
        // A late reply is skipped by its id, so one timeout keeps the connection (closing it would end the session
        // at once on a broker without grace). After three in a row, a fresh connection drops whatever is queued.
        if backoff.attempts >= 2 { try? client.reconnect() }
        let delay = backoff.next()
        update(.reconnecting(attempt: backoff.attempts))
        return Deadline(milliseconds: delay)
    }

    private func update(_ state: State) {
        let changed = shared.withLock { shared in
            defer { shared.state = state }
            return shared.state != state
        }
        if changed { onState?(state) }
    }
}

/// Capped, jittered exponential backoff: 1 s, 2 s, 4 s ... up to 30 s, each within ±20 %.
struct Backoff {
    private(set) var attempts = 0
    var first = 1_000
    var cap = 30_000

    mutating func next() -> Int {
        let base = min(cap, first << min(attempts, 16))
        attempts += 1
        return Int(Double(base) * Double.random(in: 0.8...1.2))
    }

    mutating func reset() { attempts = 0 }
}
