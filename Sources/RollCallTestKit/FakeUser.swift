import RollCallBroker
import RollCallClient
import Synchronization

/// A scripted client of one user: one session on a connection of its own, driven step by step by the test.
///
/// `crash()` closes its connection without a bye, as `kill -9` of a real client does; `freeze()` stops its
/// heartbeats while the connection stays open, as a hung process or a dead network does. While online and not frozen
/// it heartbeats before every step of ``TestBroker/advance(_:)``, as a real client would.
public final class FakeUser: Sendable {
    public let user: UserID
    public let device: String?
    private let endpoint: String
    private let broker: Broker
    private struct State {
        var client: CommandClient?
        var session: SessionID?
        var heartbeat: Int64 = 1_000
        var frozen = false
    }

    private let state: Mutex<State>

    init(user: UserID, device: String?, endpoint: String, broker: Broker) throws {
        self.user = user
        self.device = device
        self.endpoint = endpoint
        self.broker = broker
        state = Mutex(State(client: try CommandClient(endpoint: endpoint)))
    }

    /// Opens the session (hello). Returns the fake, for chaining.
    @discardableResult
    public func online(_ status: Status = .online, text: String? = nil, ttlMilliseconds: Int64? = nil) throws
        -> FakeUser
    {
        let hello = PresenceCore.Hello(
            user: user, device: device, status: status, text: text, ttlMilliseconds: ttlMilliseconds)
        try state.withLock { state in
            let granted = try connected(&state).hello(hello)
            state.session = granted.session
            state.heartbeat = granted.heartbeatMilliseconds
            state.frozen = false
        }
        return self
    }

    /// Sets the session's status and text.
    public func set(_ status: Status, text: String? = nil) throws {
        try state.withLock { state in try connected(&state).setStatus(try session(state), status, text: text) }
    }

    /// Ends the session with a bye.
    public func bye() throws {
        try state.withLock { state in
            try connected(&state).bye(try session(state))
            state.session = nil
        }
    }

    /// Closes the connection without a bye, and returns once the broker has seen it close (so that an
    /// ``TestBroker/advance(_:)`` right after cannot overtake the close). The fake remembers its session, as an app
    /// keeps its token, so that ``reconnect()`` can come back within a grace period.
    public func crash() async throws {
        let before = await broker.status()?.connections
        state.withLock { $0.client = nil }  // closing the DEALER (linger 0) closes the TCP connection
        guard let before else { throw TestKitFailure("the test broker does not answer") }
        let deadline = ContinuousClock.now + .seconds(3)
        while let now = await broker.status()?.connections, now >= before {
            guard ContinuousClock.now < deadline else {
                throw TestKitFailure("the broker did not see \(user)'s connection close within 3 s")
            }
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// Comes back after a crash over a new connection with the same session: a heartbeat over it. Within the
    /// broker's grace period nothing is published; after it the broker answers `unknown_session` (thrown).
    public func reconnect() throws {
        try state.withLock { state in
            let client = try CommandClient(endpoint: endpoint)
            try client.heartbeat(try session(state))
            state.client = client
            state.frozen = false
        }
    }

    /// Stops heartbeating; the connection stays open, so only the TTL can end the session.
    public func freeze() { state.withLock { $0.frozen = true } }

    /// The session, while open.
    public var session: SessionID? { state.withLock { $0.session } }

    var isHeartbeating: Bool { state.withLock { $0.session != nil && !$0.frozen && $0.client != nil } }

    var heartbeatMilliseconds: Int64 { state.withLock { $0.heartbeat } }

    func heartbeat() throws {
        try state.withLock { state in try connected(&state).heartbeat(try session(state)) }
    }

    func close() { state.withLock { $0.client = nil } }

    private func connected(_ state: inout State) throws -> CommandClient {
        guard let client = state.client else { throw TestKitFailure("\(user) crashed: its connection is closed") }
        return client
    }

    private func session(_ state: State) throws -> SessionID {
        guard let session = state.session else { throw TestKitFailure("\(user) has no open session: call online()") }
        return session
    }
}
