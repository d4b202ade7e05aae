import Foundation
import RollCallCore
import RollCallWire
import Synchronization
import ZeroMQ

/// A session that keeps itself alive: it says hello when made, then heartbeats on its own thread at the interval
/// the broker asked for, sends status changes, and says bye when closed.
public final class PresenceSession: Sendable {
    /// The session the broker granted.
    public let granted: PresenceCore.Granted

    private struct Shared {
        var pendingStatus: (Status, String?)?
        var closing = false
        var lastError: ClientError?
    }

    private let shared = Mutex(Shared())
    private let waker: Waker
    private let finished = DispatchSemaphore(value: 0)

    /// Says hello over a new connection to `endpoint` and starts heartbeating.
    public init(endpoint: String, hello: PresenceCore.Hello, timeoutMilliseconds: Int = 3_000) throws {
        let client = try CommandClient(endpoint: endpoint, timeoutMilliseconds: timeoutMilliseconds)
        granted = try client.hello(hello)
        let context = try Context()
        let (waker, wakeSocket) = try Waker.make(context: context, name: "session-\(granted.session.rawValue)")
        self.waker = waker
        let handOff = HandOff((client, wakeSocket, context))
        let thread = Thread { [self] in
            let (client, wakeSocket, context) = handOff.take()
            withExtendedLifetime(context) { self.heartbeat(client: client, wake: wakeSocket) }
        }
        thread.start()
    }

    /// Sets the session's status and text; sent from the session's thread at once.
    public func setStatus(_ status: Status, text: String? = nil) {
        shared.withLock { $0.pendingStatus = (status, text) }
        waker.wake()
    }

    /// The last error a heartbeat or status change met, if any.
    public var lastError: ClientError? { shared.withLock { $0.lastError } }

    /// Says bye and stops heartbeating. Returns once the bye was answered or timed out.
    public func close() {
        shared.withLock { $0.closing = true }
        waker.wake()
        finished.wait()
        finished.signal()  // a second close returns at once
        waker.close()
    }

    private func heartbeat(client: CommandClient, wake: Socket) {
        defer { finished.signal() }
        let session = granted.session
        var poller = Poller([wake])
        var next = Deadline(milliseconds: Int(granted.heartbeatMilliseconds))
        while true {
            _ = try? poller.poll(timeout: next.remaining ?? 0)
            try? wake.drain()
            let (status, closing) = shared.withLock { state in
                defer { state.pendingStatus = nil }
                return (state.pendingStatus, state.closing)
            }
            do {
                if closing {
                    try client.bye(session)
                    return
                }
                if let (status, text) = status {
                    try client.setStatus(session, status, text: text)
                    next = Deadline(milliseconds: Int(granted.heartbeatMilliseconds))
                } else if next.remaining == nil {
                    try client.heartbeat(session)
                    next = Deadline(milliseconds: Int(granted.heartbeatMilliseconds))
                }
            } catch let error as ClientError {
                shared.withLock { $0.lastError = error }
                if closing { return }
                next = Deadline(milliseconds: Int(granted.heartbeatMilliseconds))
            } catch {
                shared.withLock { $0.lastError = .malformed("\(error)") }
                return
            }
        }
    }
}
