import Foundation
import Logging
import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallWire
import Testing
import ZeroMQ

/// The integration tests, run one at a time: they block their threads in socket calls and measure time, so
/// running them side by side on two cores would starve the cooperative pool and make the figures noise.
@Suite(.serialized) enum Integration {}

/// Sleeps this thread; unlike `Task.sleep` its wake-up does not wait for a free cooperative thread.
func pause(milliseconds: Int) { usleep(useconds_t(milliseconds * 1_000)) }

/// A broker running in this process on free loopback ports, for the length of one test.
struct InProcessBroker: Sendable {
    let broker: Broker
    var command: String { broker.commandEndpoint }
    var update: String { broker.updateEndpoint }

    func client(timeout: Int = 3_000) throws -> CommandClient {
        try CommandClient(endpoint: command, timeoutMilliseconds: timeout)
    }

    /// A subscriber to `users` whose subscriptions are known to be live: each user's last value has arrived.
    func subscriber(_ users: String...) throws -> PresenceSubscriber {
        let subscriber = try PresenceSubscriber(endpoint: update)
        for user in users {
            try subscriber.subscribe(user.id)
            _ = try subscriber.expect(user, timeout: 3_000) { _ in true }
        }
        return subscriber
    }

    /// Waits until the broker's loop reports a status (its own view: connections, sessions) that satisfies
    /// `condition`, asking every 10 ms, failing after `seconds`.
    func waitForStatus(seconds: Double = 5, _ condition: (BrokerStatus) -> Bool) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
        var last: BrokerStatus?
        while true {
            last = await broker.status()
            if let status = last, condition(status) { return }
            guard ContinuousClock.now < deadline else {
                let seen = last.map { "connections \($0.connections), sessions \($0.sessions)" } ?? "no answer"
                throw TestFailure("broker status not as expected within \(seconds) s; last: \(seen)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

/// Runs `body` with a fresh broker and stops it afterwards, even when `body` throws.
func withBroker<T>(
    _ configure: (inout BrokerConfiguration) -> Void = { _ in },
    _ body: (InProcessBroker) async throws -> T
) async throws -> T {
    var configuration = BrokerConfiguration()
    configuration.commandEndpoint = "tcp://127.0.0.1:*"
    configuration.updateEndpoint = "tcp://127.0.0.1:*"
    configure(&configuration)
    var logger = Logger(label: "test-broker")
    logger.logLevel = .critical
    let broker = try Broker(configuration: configuration, logger: logger)
    let running = Task { try await broker.run() }
    // Test bodies block their thread in socket calls; start the loop's own thread before they take the pool.
    let started = ContinuousClock.now
    while !broker.isRunning {
        guard ContinuousClock.now < started + .seconds(10) else { throw TestFailure("the broker's loop did not start") }
        try await Task.sleep(for: .milliseconds(2))
    }
    do {
        let result = try await body(InProcessBroker(broker: broker))
        broker.stop()
        try await running.value
        return result
    } catch {
        broker.stop()
        _ = try? await running.value
        throw error
    }
}

/// The topic a message came on, whatever form of it the broker sent (protocol §8.2.1): `presence/carol/` for
/// `presence/carol/*/` too.
func baseTopic(_ received: String) -> String {
    ReceivedTopic(Array(received.utf8))?.topic.text ?? received
}

extension PresenceSubscriber {
    /// The first record of `user` that satisfies `matching` within `timeout` ms; records of others are skipped.
    @discardableResult
    func expect(
        _ user: String, timeout: Int = 3_000, sourceLocation: SourceLocation = #_sourceLocation,
        _ matching: (PresenceRecord) -> Bool
    ) throws -> PresenceRecord {
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while ContinuousClock.now < deadline {
            let left = ContinuousClock.now.duration(to: deadline)
            guard
                let record = try next(
                    timeout: max(
                        1,
                        Int(left.components.seconds * 1_000) + Int(left.components.attoseconds / 1_000_000_000_000_000))
                )
            else { break }
            if record.user.rawValue == user && matching(record) { return record }
        }
        throw TestFailure("no matching record of \(user) within \(timeout) ms")
    }

    /// Every record (of any subscribed user) that arrives before the first record of `marker`, which must come
    /// within `timeout` ms: a later positive event that bounds a check that nothing else happened.
    func records(before marker: String, timeout: Int = 3_000) throws -> [PresenceRecord] {
        try records(through: { $0.user.rawValue == marker }, timeout: timeout).dropLast()
    }

    /// Every record (of any subscribed user) up to and including the first that satisfies `last`, which must come
    /// within `timeout` ms.
    func records(through last: (PresenceRecord) -> Bool, timeout: Int = 3_000) throws -> [PresenceRecord] {
        var records: [PresenceRecord] = []
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while ContinuousClock.now < deadline {
            guard let record = try next(timeout: 20) else { continue }
            records.append(record)
            if last(record) { return records }
        }
        throw TestFailure("the awaited record did not come within \(timeout) ms; seen: \(records)")
    }

    /// Every record that arrives within `milliseconds`.
    func collect(for milliseconds: Int) throws -> [PresenceRecord] {
        var records: [PresenceRecord] = []
        let deadline = ContinuousClock.now + .milliseconds(milliseconds)
        while ContinuousClock.now < deadline {
            if let record = try next(timeout: 20) { records.append(record) }
        }
        return records
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension String {
    var id: UserID { UserID(validating: self)! }
}

/// Milliseconds since `start`.
func milliseconds(since start: ContinuousClock.Instant) -> Double {
    let elapsed = ContinuousClock.now - start
    return Double(elapsed.components.seconds) * 1_000 + Double(elapsed.components.attoseconds) / 1e15
}

/// A raw ZeroMQ socket connected to `endpoint`, for speaking the protocol byte by byte.
func rawSocket(_ kind: Socket.Kind, _ endpoint: String, context: Context) throws -> Socket {
    let socket = try Socket(context, kind)
    try socket.set(.linger(milliseconds: 0))
    try socket.connect(endpoint)
    return socket
}

extension Socket {
    /// The next message within `timeout` ms, as byte arrays, or `nil`.
    func receive(timeout: Int) throws -> [[UInt8]]? {
        var poller = Poller([self])
        guard try poller.poll(timeout: timeout)[0], let message = try receiveMessage() else { return nil }
        return message.frames.map(\.bytes)
    }
}

/// Whether every established TCP connection to or from `port` on this host has nothing waiting: no byte unsent or
/// unacknowledged on the connecting side (tx_queue) and none unread on the listening side (rx_queue), from
/// /proc/net/tcp.
func tcpQueuesEmpty(port: Int) -> Bool {
    guard let file = FileHandle(forReadingAtPath: "/proc/net/tcp") else { return false }
    let text = String(decoding: file.readDataToEndOfFile(), as: UTF8.self)
    try? file.close()
    for line in text.split(separator: "\n").dropFirst() {
        let fields = line.split(separator: " ")
        guard fields.count > 4, fields[3] == "01",
            let local = Int(fields[1].split(separator: ":").last ?? "", radix: 16),
            let remote = Int(fields[2].split(separator: ":").last ?? "", radix: 16)
        else { continue }
        let queues = fields[4].split(separator: ":").map { Int($0, radix: 16) ?? 0 }
        guard queues.count == 2 else { continue }
        if local == port && queues[1] != 0 { return false }
        if remote == port && queues[0] != 0 { return false }
    }
    return true
}
