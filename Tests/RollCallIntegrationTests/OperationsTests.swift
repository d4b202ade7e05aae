import Foundation
import Logging
import RollCallBroker
import RollCallClient
import RollCallOperations
import RollCallServer
import RollCallTestSupport
import Testing

/// One HTTP/1.1 exchange over a plain TCP socket: what a scraper or a browser sends, and also what they never would.
func httpExchange(port: Int, _ request: String) throws -> (status: Int, body: String) {
    let descriptor = try connectLoopback(port: port)
    defer { close(descriptor) }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let bytes = Array(request.utf8)
    var sent = 0
    while sent < bytes.count {
        let n = bytes[sent...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard n > 0 else { break }  // the server may close early on a request it refuses
        sent += n
    }
    var response: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let n = recv(descriptor, &buffer, buffer.count, 0)
        guard n > 0 else { break }
        response += buffer[..<n]
    }
    let text = String(decoding: response, as: UTF8.self)
    guard text.hasPrefix("HTTP/1.1 "), let status = Int(text.dropFirst(9).prefix(3)) else { return (0, text) }
    let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
    return (status, body)
}

/// `GET path` with the connection closed after the answer.
func httpGet(port: Int, _ path: String) throws -> (status: Int, body: String) {
    try httpExchange(port: port, "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
}

/// Prometheus's text format (0.0.4), parsed: each sample by its name and labels as written, such as
/// `rollcall_requests_total{op="hello",result="ok"}`.
func parsePrometheus(_ text: String) throws -> [String: Double] {
    var samples: [String: Double] = [:]
    for line in text.split(separator: "\n") where !line.hasPrefix("#") {
        guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
            throw TestFailure("not a Prometheus sample: \(line)")
        }
        samples[String(line[..<space])] = value
    }
    return samples
}

/// A Unix datagram socket standing in for systemd's notify socket.
final class FakeNotifySocket {
    let path: String
    private let descriptor: Int32

    init() throws {
        path =
            FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID().uuidString.prefix(8))")
            .path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else { throw TestFailure("cannot bind \(path)") }
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit {
        close(descriptor)
        unlink(path)
    }

    /// The datagrams that arrive within `milliseconds`.
    func receive(for milliseconds: Int) -> [String] {
        var messages: [String] = []
        let deadline = ContinuousClock.now + .milliseconds(milliseconds)
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while ContinuousClock.now < deadline {
            let n = recv(descriptor, &buffer, buffer.count, 0)
            if n > 0 { messages.append(String(decoding: buffer[..<n], as: UTF8.self)) }
        }
        return messages
    }
}

extension Integration {
    @Suite("Operations: metrics, health, readiness, systemd, status page")
    struct OperationsTests {
        /// `serve --http-endpoint` serves metrics that move with the traffic (parsed as Prometheus text), health
        /// and readiness, the status page and its data; systemd's notify socket gets READY, WATCHDOG and STOPPING.
        @Test func metricsHealthAndSystemd() async throws {
            let notify = try FakeNotifySocket()
            let child = try ChildProcess(
                ChildProcess.rollcall,
                [
                    "serve", "--ephemeral", "--command-endpoint", "tcp://127.0.0.1:*", "--update-endpoint",
                    "tcp://127.0.0.1:*", "--http-endpoint", "127.0.0.1:0", "--print-endpoints",
                ],
                environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"])
            defer { child.terminate() }
            let line = try child.waitForOutput(containing: #""http":"#)
            let endpoints = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let http = try #require(endpoints["http"] as? String)
            let port = try #require(Int(http.split(separator: ":").last ?? ""))
            let command = try #require(endpoints["command"] as? String)
            let update = try #require(endpoints["update"] as? String)

            let started = notify.receive(for: 700)
            #expect(started.first?.hasPrefix("READY=1") == true, "\(started)")
            #expect(started.filter { $0 == "WATCHDOG=1" }.count >= 2, "\(started)")
            #expect(try httpGet(port: port, "/readyz").status == 200)
            #expect(try httpGet(port: port, "/healthz").status == 200)
            // Before any session ended, every reason is already exported at 0 (Prometheus' convention).
            let first = try parsePrometheus(httpGet(port: port, "/metrics").body)
            for reason in ["bye", "status", "closed", "timeout", "restart", "node_lost", "revoked"] {
                #expect(first[#"rollcall_sessions_ended_total{reason="\#(reason)"}"#] == 0, "\(reason)")
            }

            let subscriber = try PresenceSubscriber(endpoint: update)
            try subscriber.subscribe("m1".id)
            _ = try subscriber.expect("m1") { _ in true }
            let client = try CommandClient(endpoint: command)
            let sessions = try (1...3).map { try client.hello(.init(user: "m\($0)".id)).session }
            try client.setStatus(sessions[0], .busy)
            try client.bye(sessions[2])
            #expect(throws: ClientError.self) { try client.setStatus(SessionID("nope"), .away) }
            _ = try client.group("ops".group, GroupEdit(members: ["m1".id, "m2".id]))
            var samples: [String: Double] = [:]
            try await waitFor(seconds: 3) {
                samples = (try? parsePrometheus(httpGet(port: port, "/metrics").body)) ?? [:]
                return samples["rollcall_sessions"] == 2 && samples["rollcall_groups"] == 1
            }
            print("metrics: \(samples.filter { $0.key.hasPrefix("rollcall_") && !$0.key.contains("bucket") })")
            #expect(samples["rollcall_users_available"] == 2)
            #expect(samples[#"rollcall_requests_total{op="hello",result="ok"}"#] == 3)
            #expect(samples[#"rollcall_requests_total{op="status",result="unknown_session"}"#] == 1)
            #expect(samples[#"rollcall_sessions_ended_total{reason="bye"}"#] == 1)
            #expect((samples[#"rollcall_updates_published_total{kind="presence"}"#] ?? 0) >= 5)
            #expect((samples[#"rollcall_updates_published_total{kind="broker"}"#] ?? 0) >= 1)
            #expect(samples["rollcall_subscriptions"] == 1)  // presence/m1/
            #expect((samples["rollcall_loop_iteration_seconds_count"] ?? 0) > 0)
            #expect((samples["process_resident_memory_bytes"] ?? 0) > 1_000_000)
            #expect((samples["process_open_fds"] ?? 0) > 3)
            #expect(samples["rollcall_store_pending_changes"] != nil)

            let status = try httpGet(port: port, "/api/status")
            #expect(status.status == 200)
            #expect(status.body.contains(#""sessions":2"#))
            #expect(status.body.contains(#""user":"m3","status":"offline""#))
            let user = try httpGet(port: port, "/api/users/m1")
            #expect(user.body.contains(#""groups":["ops"]"#) && user.body.contains(#""status":"busy""#))
            let page = try httpGet(port: port, "/")
            #expect(page.status == 200 && page.body.contains("<title>RollCall</title>"))
            #expect(try httpGet(port: port, "/nope").status == 404)
            #expect(try httpGet(port: port, "/api/users/not%20a%20user").status == 400)

            child.signal(SIGTERM)
            #expect(try child.waitForExit(timeout: 5_000) == 0)
            let stopping = notify.receive(for: 300)
            #expect(stopping.contains("STOPPING=1"), "\(stopping)")
        }

        /// A malformed or huge HTTP request gets a 4xx (or the connection closed) and the endpoint keeps serving.
        @Test func badHTTPRequestsAreRefused() async throws {
            try await withOperations { port, _ in
                let malformed = try httpExchange(port: port, "NONSENSE\r\n\r\n")
                #expect(malformed.status == 0 || (400..<500).contains(malformed.status), "\(malformed)")
                let huge = try httpExchange(
                    port: port,
                    "GET / HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 200_000))\r\n\r\n")
                #expect(huge.status == 0 || (400..<500).contains(huge.status), "status \(huge.status)")
                #expect(try httpGet(port: port, "/healthz").status == 200)
            }
        }

        /// /readyz answers 503 from the moment shutdown begins, while the HTTP endpoint still serves.
        @Test func notReadyOnceStopping() async throws {
            try await withOperations { port, broker in
                #expect(try httpGet(port: port, "/readyz").status == 200)
                broker.stop()
                let stopping = try httpGet(port: port, "/readyz")
                #expect(stopping.status == 503)
                #expect(stopping.body.hasPrefix("stopping"))
            }
        }

        /// Runs `body` with an in-process broker and its HTTP endpoint on a free port, as the assembly builds them;
        /// each runs on its own here (not in the assembly's group), so that a test can stop the broker alone.
        func withOperations(_ body: (Int, Broker) async throws -> Void) async throws {
            var configuration = BrokerConfiguration()
            configuration.commandEndpoint = "tcp://127.0.0.1:*"
            configuration.updateEndpoint = "tcp://127.0.0.1:*"
            var logger = Logger(label: "test-operations")
            logger.logLevel = .critical
            let server = try await RollCallServer(
                ServerConfiguration(broker: configuration, operations: OperationsSettings(endpoint: "127.0.0.1:0")),
                logger: logger)
            let broker = server.broker
            let operations = try #require(server.operations)
            let running = Task { try await broker.run() }
            let serving = Task { try await operations.run() }
            defer {
                broker.stop()
                serving.cancel()
            }
            try await waitFor { broker.isRunning && operations.address != nil }
            try await body(operations.address!.port, broker)
            broker.stop()
            try await running.value
        }

        /// At debug level, with JSON logs, each session's life is one parseable line per step: opened, moved to a
        /// new connection, ended and why; info level logs nothing per request.
        @Test func sessionLifeInJSONLogs() async throws {
            let child = try ChildProcess(
                ChildProcess.rollcall,
                [
                    "serve", "--ephemeral", "--command-endpoint", "tcp://127.0.0.1:*", "--update-endpoint",
                    "tcp://127.0.0.1:*", "--log-level", "debug", "--log-format", "json", "--print-endpoints",
                ])
            defer { child.terminate() }
            let line = try child.waitForOutput(containing: #""command":"#)
            let endpoints = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let command = try #require(endpoints["command"] as? String)
            let first = try CommandClient(endpoint: command)
            let session = try first.hello(.init(user: "logged".id)).session
            let second = try CommandClient(endpoint: command)
            try second.heartbeat(session)  // the session moves to the second connection
            try second.reconnect()  // the second connection closes: the session ends, reason closed
            try child.waitForOutput(containing: #""message":"session ended""#, inStderr: true)
            let lines = child.stderr.split(separator: "\n")
            let objects = try lines.map { line in
                try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
            }
            let steps = objects.filter { $0["session"] == session.rawValue }.map { $0["message"] ?? "" }
            print("session life in the log: \(steps)")
            #expect(steps == ["session opened", "session moved to a new connection", "session ended"])
            #expect(objects.first { $0["message"] == "session ended" }?["reason"] == "closed")
            #expect(objects.allSatisfy { $0["time"] != nil && $0["level"] != nil })
        }
    }
}
