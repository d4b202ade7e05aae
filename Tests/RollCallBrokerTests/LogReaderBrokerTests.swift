import Dispatch
import Foundation
import Logging
import RollCallCore
import RollCallStore
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

@testable import RollCallBroker

/// A log read off the loop, in a running broker (docs/history.md, "Reads off the loop"): the reader is held in a
/// hook, and the loop goes on answering the other connections.
@Suite("Log reads do not block the loop")
struct LogReaderBrokerTests {
    struct TimedOut: Error, CustomStringConvertible {
        let description: String
    }

    /// The next message on `socket` within `timeout` ms, or `nil`.
    static func receive(_ socket: Socket, timeout: Int) throws -> [UInt8]? {
        var poller = Poller([socket])
        guard try poller.poll(timeout: timeout)[0], let message = try socket.receiveMessage() else { return nil }
        return message.frames.last?.bytes
    }

    static func request(_ socket: Socket, _ body: String) throws {
        _ = try socket.send(Array(body.utf8), wait: true)
    }

    /// The reply's fields, with its id checked.
    static func reply(_ socket: Socket, id: String, timeout: Int = 3_000) throws -> [JSONKey: JSON] {
        guard let bytes = try receive(socket, timeout: timeout) else {
            throw TimedOut(description: "no reply to \(id)")
        }
        let reply = try Codec.decodeReply(bytes)
        #expect(reply.id == .string(id), "a reply came out of order")
        return try reply.result.get()
    }

    /// While the reader is held inside a `history` read, another connection's `ping` is answered; the reading
    /// connection's own later `ping` waits behind its read (its replies keep their order). Once the reader goes on,
    /// the read's answer holds the transition published just before it was asked, which the store had not written
    /// (its writes fail meanwhile). A broker stopped with a read held in the reader stops cleanly.
    @Test func aHeldReadDoesNotStallOtherConnections() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = StoreWriterLogTests.FailingStore(try SQLiteStore(directory: directory))
        let gate = DispatchSemaphore(value: 0)
        let entered = Atomic<Int>(0)
        var configuration = BrokerConfiguration()
        configuration.commandEndpoint = "tcp://127.0.0.1:*"
        configuration.updateEndpoint = "tcp://127.0.0.1:*"
        configuration.storage = .store(store)
        configuration.logReadHook = {
            entered.add(1, ordering: .sequentiallyConsistent)
            gate.wait()
        }
        var logger = Logger(label: "test-broker")
        logger.logLevel = .critical
        let broker = try Broker(configuration: configuration, logger: logger)
        let running = Task { try await broker.run() }
        defer { broker.stop() }
        try await waitUntil("the loop started") { broker.isRunning }

        let context = try Context()
        let reading = try Socket(context, .dealer)
        let other = try Socket(context, .dealer)
        for socket in [reading, other] {
            try socket.set(.linger(milliseconds: 0))
            try socket.connect(broker.commandEndpoint)
        }
        defer {
            reading.close()
            other.close()
        }
        try Self.request(reading, #"{"op":"hello","id":"h","user":"alice"}"#)
        _ = try Self.reply(reading, id: "h")
        // Published, and not in the file: the store fails every write until told otherwise.
        try Self.request(reading, #"{"op":"history","id":"read","user":"alice"}"#)
        try Self.request(reading, #"{"op":"ping","id":"after"}"#)
        try await waitUntil("the reader took the read") { entered.load(ordering: .sequentiallyConsistent) == 1 }

        try Self.request(other, #"{"op":"ping","id":"other"}"#)
        let ping = try Self.reply(other, id: "other")
        #expect(ping["broker"] != nil)
        #expect(try Self.receive(reading, timeout: 0) == nil)  // the read is still held, and the ping behind it
        #expect(entered.load(ordering: .sequentiallyConsistent) == 1)
        // The transition is not in the file: the read can only have it from what waits for the writer.
        let file = try PresenceLog(directory: directory, readOnly: true)
        #expect(try file.history(of: "alice".id, from: nil, to: nil, after: nil, limit: 10).isEmpty)

        gate.signal()
        let page = try Codec.decodeLogPage(try Self.reply(reading, id: "read"), name: "history")
        #expect(page.entries.map(\.record.status) == [.online])
        #expect(page.entries.first?.record.user == UserID(validating: "alice"))
        _ = try Self.reply(reading, id: "after")

        // Stopped while a read is held: the loop ends, the read is dropped, nothing crashes.
        try Self.request(reading, #"{"op":"events","id":"late","after":0}"#)
        try await waitUntil("the reader took the second read") {
            entered.load(ordering: .sequentiallyConsistent) == 2
        }
        store.failing.store(false, ordering: .releasing)  // the last write at stop succeeds
        broker.stop()
        gate.signal()
        try await running.value
    }
}
