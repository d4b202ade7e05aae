import Foundation
import Logging
import RollCallBroker
import RollCallClient
import RollCallOperations
import RollCallServer
import ServiceLifecycle
import Synchronization

/// Why a test-kit expectation or call failed: what was expected, and what was seen instead.
public struct TestKitFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A broker in test mode, in this process, on free loopback ports, whose clock the test drives with
/// ``advance(_:)``: TTLs, grace periods and group batch windows are reached without waiting.
///
/// ```swift
/// try await withTestBroker { broker in
///     let watch = try broker.watch("alice")
///     let phone = try broker.user("alice", device: "phone").online()
///     try watch.expect("alice", status: .online)
///     phone.freeze()
///     try broker.advance(3_000)
///     try watch.expect("alice", status: .offline, reason: .timeout)
/// }
/// ```
public final class TestBroker: Sendable {
    /// The broker's endpoints.
    public let command: String
    public let update: String
    /// The server as `rollcall serve` assembles it (RollCallServer), with the broker and, if asked, its doors.
    public let server: RollCallServer
    var broker: Broker { server.broker }
    private let group: ServiceGroup
    private let running: Task<Void, Error>
    private let fakes = Mutex<[FakeUser]>([])
    private let control: Mutex<CommandClient>

    /// Starts a broker in test mode; `configure` may change any setting (TTLs, grace, limits) but not the endpoints
    /// or the storage. Group messages are not batched unless `configure` sets a window: on a manual clock a batch
    /// window only ends when the test advances past it.
    ///
    /// With `webSocket` the broker also has its WebSocket door on a free loopback port (``webSocketURL``), without
    /// tokens unless `configure` names a key file; its pings follow the test clock. With `operations` it has its
    /// operations endpoint (``operationsAddress``: `/healthz`, `/readyz`, `/api/status`; `/metrics` shows only the
    /// process metrics, since the test process's metrics system is not RollCall's to bootstrap).
    public init(
        webSocket: Bool = false, operations: Bool = false, _ configure: (inout BrokerConfiguration) -> Void = { _ in }
    ) async throws {
        var configuration = BrokerConfiguration()
        configuration.presence.groupBatchMilliseconds = 0
        configure(&configuration)
        configuration.testMode = true
        configuration.commandEndpoint = "tcp://127.0.0.1:*"
        configuration.updateEndpoint = "tcp://127.0.0.1:*"
        configuration.storage = .none
        if webSocket { configuration.webSocket.endpoint = "127.0.0.1:0" }
        var logger = Logger(label: "rollcall-test-broker")
        logger.logLevel = .critical
        let server = try await RollCallServer(
            ServerConfiguration(
                broker: configuration, operations: operations ? OperationsSettings(endpoint: "127.0.0.1:0") : nil),
            logger: logger)
        self.server = server
        command = server.broker.commandEndpoint
        update = server.broker.updateEndpoint
        let group = server.serviceGroup(logger: logger)
        self.group = group
        running = Task { try await group.run() }
        let started = ContinuousClock.now
        while !server.broker.isRunning || (webSocket && server.webSocketAddress == nil)
            || (operations && server.operationsAddress == nil)
        {
            guard ContinuousClock.now < started + .seconds(10) else {
                await group.triggerGracefulShutdown()
                throw TestKitFailure("the test broker did not start within 10 s")
            }
            try await Task.sleep(for: .milliseconds(1))
        }
        control = Mutex(try CommandClient(endpoint: server.broker.commandEndpoint))
    }

    /// `ws://127.0.0.1:PORT/v1/ws`, with `webSocket`.
    public var webSocketURL: String? { server.webSocketAddress.map { $0 + "/v1/ws" } }

    /// `127.0.0.1:PORT` of the operations endpoint, with `operations`.
    public var operationsAddress: String? { server.operationsAddress }

    /// Stops the broker (and its doors) and waits for it; throws if it failed.
    public func stop() async throws {
        for fake in fakes.withLock({ $0 }) { fake.close() }
        await group.triggerGracefulShutdown()
        try await running.value
    }

    /// Moves the broker's clock forward by `milliseconds`. Fake users that are online and not frozen heartbeat
    /// before every step of at most their heartbeat interval, as their real clients would, so only the frozen ones
    /// run out of TTL. Returns once every deadline on the way has fired and its records are published.
    @discardableResult
    public func advance(_ milliseconds: Int64) throws -> BrokerTime {
        var left = milliseconds
        var time = try now()
        repeat {
            let live = fakes.withLock { $0 }.filter(\.isHeartbeating)
            for fake in live { try fake.heartbeat() }
            let step = min(left, live.map(\.heartbeatMilliseconds).min() ?? left)
            time = try advanceClock(step)
            left -= step
        } while left > 0
        return time
    }

    /// One `advance` request: the clock moves by `milliseconds` at once, with no heartbeats on the way.
    @discardableResult
    public func advanceClock(_ milliseconds: Int64) throws -> BrokerTime {
        let fields = try control.withLock { try $0.call(.advance(milliseconds: milliseconds)) }
        guard let time = fields["time"]?.integer else { throw TestKitFailure("advance answered no time: \(fields)") }
        return BrokerTime(milliseconds: time)
    }

    /// The broker's clock.
    public func now() throws -> BrokerTime { try control.withLock { try $0.ping().time } }

    /// A fake user: a client of its own (its own connection) that can go online, change status, say bye, crash
    /// or freeze.
    public func user(_ name: String, device: String? = nil) throws -> FakeUser {
        guard let user = UserID(validating: name) else { throw TestKitFailure("invalid user id '\(name)'") }
        let fake = try FakeUser(user: user, device: device, endpoint: command, broker: broker)
        fakes.withLock { $0.append(fake) }
        return fake
    }

    /// A subscriber to these users' topics, each one's current record already in hand.
    public func watch(_ users: String...) throws -> Watch {
        try Watch(endpoint: update, users: users.map(Self.id))
    }

    /// Defines the group with these members (or reads it, without `members`) and follows its topic.
    public func watchGroup(_ group: String, members: [String]? = nil) throws -> GroupWatch {
        guard let id = GroupID(validating: group) else { throw TestKitFailure("invalid group id '\(group)'") }
        if let members {
            _ = try control.withLock { try $0.group(id, GroupEdit(members: try members.map(Self.id))) }
        }
        return try GroupWatch(endpoint: update, group: id)
    }

    /// The current records of `users`, by `query`.
    public func query(_ users: String...) throws -> [UserID: PresenceRecord] {
        let ids = try users.map(Self.id)
        return try control.withLock { try $0.query(ids) }
    }

    static func id(_ text: String) throws -> UserID {
        guard let user = UserID(validating: text) else { throw TestKitFailure("invalid user id '\(text)'") }
        return user
    }
}

/// Runs `body` with a fresh test broker (with its WebSocket door and operations endpoint if asked) and stops it
/// afterwards, also when `body` throws.
public func withTestBroker<T>(
    webSocket: Bool = false, operations: Bool = false, _ configure: (inout BrokerConfiguration) -> Void = { _ in },
    _ body: (TestBroker) async throws -> T
) async throws -> T {
    let broker = try await TestBroker(webSocket: webSocket, operations: operations, configure)
    do {
        let result = try await body(broker)
        try await broker.stop()
        return result
    } catch {
        try? await broker.stop()
        throw error
    }
}
