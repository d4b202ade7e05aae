import ArgumentParser
import Foundation
import RollCallBench
import RollCallClient
import RollCallKit
import RollCallTestSupport

/// `rollcall-bench sdk`: the app SDK's figures (docs/swift-sdk.md §8), against a `rollcall serve` child process with a
/// WebSocket endpoint on loopback: a change to the store's update (p50/p99), the memory of a store following 1,000
/// users, and the time from `reconnectNow()` to a live session after the broker comes back.
struct SDKBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sdk", abstract: "RollCallKit: change → store latency, store memory, reconnectNow() to online.")

    @Option(help: "Status changes timed one at a time.") var changes = 1_000
    @Option(help: "Users the memory figure's store follows.") var users = 1_000
    @Option(help: "Broker restarts timed for reconnectNow().") var restarts = 5

    @MainActor
    func run() async throws {
        // The raw WebSocket row first, from the same build on the same machine, to read the SDK's row beside it.
        let bench = PresenceBenchmarks(executable: brokerExecutable()) { _ in }
        let raw = try bench.webSocketLatency(changes: changes)
        emit("\(raw.id) (raw WebSocket, no SDK): \(raw.summary)")
        let broker = try SDKBroker(port: 0)
        defer { broker.stop() }
        try await latency(broker)
        try await memory(broker)
        try await reconnect(broker)
    }

    /// A change made over ZeroMQ, timed until the SDK's records stream (fed with the store's update) hands it out.
    @MainActor
    private func latency(_ broker: SDKBroker) async throws {
        let command = UncheckedBox(try CommandClient(endpoint: broker.command, timeoutMilliseconds: 3_000))
        let session = try command.value.hello(.init(user: UserID(validating: "lat")!, ttlMilliseconds: 600_000)).session
        let client = PresenceClient(url: broker.url)
        defer { Task { await client.close() } }
        var records = client.records().makeAsyncIterator()
        client.follow(UserID(validating: "lat")!)
        _ = await records.next()  // the current record
        var histogram = LatencyHistogram()
        for index in 0..<changes {
            let text = "c\(index)"
            let stamp = ContinuousClock.now
            // The blocking ZeroMQ call off the main actor, so that the store's update is not held up by it.
            let sending = Task.detached { try? command.value.setStatus(session, .online, text: text) }
            while let record = await records.next(), record.text != text {}
            let elapsed = ContinuousClock.now - stamp
            // One call at a time on the command client, which is not made for two at once.
            await sending.value
            histogram.record(
                microseconds: UInt64(
                    elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000))
        }
        emit(
            String(
                format: "sdk latency: change → store update over WebSocket, %d changes: p50 %.3f ms, p99 %.3f ms, "
                    + "max %.3f ms", changes, histogram.milliseconds(at: 50), histogram.milliseconds(at: 99),
                histogram.maxMilliseconds))
    }

    /// The process's resident memory before and after a store follows `users` users (their current records held).
    @MainActor
    private func memory(_ broker: SDKBroker) async throws {
        let before = ProcessStats.residentBytes(pid: getpid())
        let client = PresenceClient(url: broker.url)
        defer { Task { await client.close() } }
        for index in 0..<users { client.follow(UserID(validating: "m\(index)")!) }
        let deadline = ContinuousClock.now + .seconds(30)
        while client.store.users.count < users {
            guard ContinuousClock.now < deadline else {
                throw ValidationError("only \(client.store.users.count) of \(users) records within 30 s")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        let after = ProcessStats.residentBytes(pid: getpid())
        emit(
            "sdk memory: a store following \(users) users: RSS +\((after - before) / 1_024) KiB "
                + "(\((after - before) / users) bytes a user, the client's connections included)")
    }

    /// The broker is killed and started again on the same port; `reconnectNow()` is timed until the session is live.
    @MainActor
    private func reconnect(_ broker: SDKBroker) async throws {
        let client = PresenceClient(url: broker.url, me: UserID(validating: "rc")!)
        defer { Task { await client.close() } }
        var took: [Double] = []
        for _ in 0..<restarts {
            try await until("live", client) { if case .live = $0.store.session { true } else { false } }
            broker.kill()
            try await until("retrying", client) {
                if case .reconnecting(let attempt) = $0.store.session { attempt >= 2 } else { false }
            }
            try broker.restart()
            let started = ContinuousClock.now
            client.reconnectNow()
            try await until("live again", client) { if case .live = $0.store.session { true } else { false } }
            let elapsed = ContinuousClock.now - started
            took.append(Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1_000)
        }
        took.sort()
        emit(
            String(
                format: "sdk reconnectNow() to a live session after the broker came back, %d restarts: median %.1f ms, "
                    + "max %.1f ms", restarts, took[took.count / 2], took.last ?? 0))
    }

    @MainActor
    private func until(
        _ what: String, _ client: PresenceClient, _ condition: @MainActor (PresenceClient) -> Bool
    ) async throws {
        let deadline = ContinuousClock.now + .seconds(15)
        while !condition(client) {
            guard ContinuousClock.now < deadline else { throw ValidationError("not \(what) within 15 s") }
            try await Task.sleep(for: .milliseconds(1))
        }
    }
}

/// Hands a value that is used from one task at a time to a detached task.
private final class UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// `rollcall serve --ws-endpoint` as a child process that can be killed and started again on the same port.
private final class SDKBroker {
    private var process: Process
    private(set) var command: String
    let url: String

    init(port: Int) throws {
        (process, command, url) = try Self.start(port: port)
    }

    private static func start(port: Int) throws -> (Process, String, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: brokerExecutable())
        process.arguments = [
            "serve", "--command-endpoint", "tcp://127.0.0.1:*", "--update-endpoint", "tcp://127.0.0.1:*",
            "--ws-endpoint", "127.0.0.1:\(port)", "--ws-max-subscriptions", "100000", "--print-endpoints",
            "--ephemeral",
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        var text = ""
        let deadline = Date().addingTimeInterval(10)
        while !text.contains("\n"), Date() < deadline {
            let data = output.fileHandleForReading.availableData
            if data.isEmpty { break }
            text += String(decoding: data, as: UTF8.self)
        }
        guard let line = text.split(separator: "\n").first,
            let fields = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let command = fields["command"] as? String, let url = fields["ws"] as? String
        else {
            process.terminate()
            throw ValidationError("the broker did not start: \(text)")
        }
        return (process, command, url)
    }

    /// SIGKILL: every connection is reset, as when the network goes.
    func kill() {
        guard process.isRunning else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// A new run on the same WebSocket port.
    func restart() throws {
        kill()
        guard let port = Int(url.split(separator: ":").last?.split(separator: "/").first ?? "") else {
            throw ValidationError("no port in \(url)")
        }
        (process, command, _) = try Self.start(port: port)
    }

    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }
}
