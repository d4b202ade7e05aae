import Foundation
import Logging
import RollCallBroker
import RollCallCore
import RollCallOperations
import RollCallServer
import RollCallTestKit
import RollCallTestSupport
import RollCallWire
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension Integration {
    /// The one assembly (RollCallServer) as the test kit uses it, and the operations endpoint's bounds under a flood
    /// of connections that never finish their request.
    @Suite struct AssemblyTests {
        /// A test-kit broker started with its WebSocket door answers a hello over a real WebSocket, and the session
        /// is seen on the ZeroMQ side.
        @Test func testKitBrokerHasAWebSocketDoor() async throws {
            try await withTestBroker(webSocket: true) { broker in
                let url = try #require(broker.webSocketURL)
                let watch = try broker.watch("ws-alice")
                let client = try await WebSocketTestClient.connect(url)
                let hello = try await client.call(#"{"op":"hello","id":"h","user":"ws-alice"}"#, id: "h")
                #expect(hello[JSONKey("ok")] == .bool(true))
                try watch.expect("ws-alice", status: .online)
                client.close()
            }
        }

        /// A test-kit broker started with its operations endpoint answers `/healthz` and `/readyz`.
        @Test func testKitBrokerHasAnOperationsEndpoint() async throws {
            try await withTestBroker(operations: true) { broker in
                let address = try #require(broker.operationsAddress)
                let port = try #require(Int(address.split(separator: ":").last ?? ""))
                let health = try httpGet(port: port, "/healthz")
                #expect(health.status == 200)
                #expect(health.body.hasPrefix("ok"))
                #expect(try httpGet(port: port, "/readyz").status == 200)
            }
        }

        /// Runs `body` with a broker and its operations endpoint (these bounds), from the assembly.
        func withEndpoint(
            _ settings: (inout OperationsSettings) -> Void, _ body: (Int) async throws -> Void
        ) async throws {
            var configuration = BrokerConfiguration()
            configuration.commandEndpoint = "tcp://127.0.0.1:*"
            configuration.updateEndpoint = "tcp://127.0.0.1:*"
            var operations = OperationsSettings(endpoint: "127.0.0.1:0")
            settings(&operations)
            var logger = Logger(label: "test-assembly")
            logger.logLevel = .critical
            let server = try await RollCallServer(
                ServerConfiguration(broker: configuration, operations: operations), logger: logger)
            let group = server.serviceGroup(logger: logger)
            let running = Task { try await group.run() }
            defer { running.cancel() }
            try await waitFor(seconds: 10) { server.broker.isRunning && server.operationsAddress != nil }
            try await body(try #require(server.operations?.address?.port))
            await group.triggerGracefulShutdown()
            try await running.value
        }

        /// 1,124 connections that each send half a request head (the flood that once held every descriptor for
        /// 30 s and more): those past the cap are closed at once, the rest at the header timeout, and `/healthz`
        /// answers within the header timeout plus a margin.
        @Test func halfSentHeadsDoNotMakeTheEndpointDeaf() async throws {
            try await withEndpoint({
                $0.headerTimeoutMilliseconds = 500
                $0.maxConnections = 256
            }) { port in
                var flood: [Int32] = []
                defer { flood.forEach { close($0) } }
                let half = Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".utf8)
                for _ in 0..<1_124 {
                    let descriptor = try connectLoopback(port: port)
                    flood.append(descriptor)
                    _ = send(descriptor, half, half.count, Int32(MSG_NOSIGNAL))
                }
                let started = ContinuousClock.now
                var answered: (status: Int, body: String)?
                while answered?.status != 200, milliseconds(since: started) < 3_000 {
                    answered = try? httpGet(port: port, "/healthz")
                    if answered?.status != 200 { try await Task.sleep(for: .milliseconds(20)) }
                }
                let took = milliseconds(since: started)
                let closed = flood.filter { isClosedByPeer($0) }.count
                print("after 1,124 half-sent heads: /healthz answered in \(Int(took)) ms; \(closed) of them closed")
                #expect(answered?.status == 200)
                #expect(took < 3_000)
                #expect(closed >= 1_124 - 256)
            }
        }

        /// A connection that sends half a head is closed at the header timeout; one idle after a keep-alive answer
        /// is closed at the idle timeout.
        @Test func slowAndIdleConnectionsAreClosed() async throws {
            try await withEndpoint({
                $0.headerTimeoutMilliseconds = 300
                $0.idleTimeoutMilliseconds = 600
            }) { port in
                let slow = try connectLoopback(port: port)
                defer { close(slow) }
                let half = Array("GET /healthz HTTP/1.1\r\n".utf8)
                _ = send(slow, half, half.count, Int32(MSG_NOSIGNAL))
                let slowClosed = waitForClose(slow, timeout: 3_000)
                print("half a head: closed after \(slowClosed.map { "\(Int($0)) ms" } ?? "more than 3 s")")
                #expect(slowClosed.map { $0 >= 250 && $0 < 2_000 } == true)

                let idle = try connectLoopback(port: port)
                defer { close(idle) }
                let request = Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
                _ = send(idle, request, request.count, Int32(MSG_NOSIGNAL))
                var buffer = [UInt8](repeating: 0, count: 4_096)
                var timeout = timeval(tv_sec: 3, tv_usec: 0)
                setsockopt(idle, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                let count = recv(idle, &buffer, buffer.count, 0)
                #expect(
                    count > 0 && String(decoding: buffer[..<max(0, count)], as: UTF8.self).hasPrefix("HTTP/1.1 200"))
                let idleClosed = waitForClose(idle, timeout: 5_000)
                print("idle after an answer: closed after \(idleClosed.map { "\(Int($0)) ms" } ?? "more than 5 s")")
                #expect(idleClosed.map { $0 >= 500 && $0 < 3_000 } == true)
            }
        }
    }
}

/// Whether the peer has closed `descriptor` (a read returns end of file or a reset) without waiting.
private func isClosedByPeer(_ descriptor: Int32) -> Bool {
    var byte: UInt8 = 0
    let count = recv(descriptor, &byte, 1, Int32(MSG_DONTWAIT))
    return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
}

/// Milliseconds until the peer closes `descriptor` (what it sends meanwhile is read and dropped), or `nil` if it is
/// still open after `timeout` ms.
private func waitForClose(_ descriptor: Int32, timeout: Int) -> Double? {
    let started = ContinuousClock.now
    var tenth = timeval(tv_sec: 0, tv_usec: 50_000)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &tenth, socklen_t(MemoryLayout<timeval>.size))
    var buffer = [UInt8](repeating: 0, count: 4_096)
    while milliseconds(since: started) < Double(timeout) {
        let count = recv(descriptor, &buffer, buffer.count, 0)
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { return milliseconds(since: started) }
    }
    return nil
}
