import DequeModule
import Foundation
import HummingbirdTLS
import HummingbirdWSClient
import JWTKit
import Logging
import RollCallBroker
import RollCallGateway
import RollCallServer
import RollCallTestSupport
import RollCallWebSocketClient
import RollCallWire
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The HMAC secret the tests' tokens are signed with.
let testSecret = "rollcall-test-secret-of-at-least-32-bytes"

/// A broker with a WebSocket endpoint on a free loopback port, for the length of one test.
struct GatewayHarness: Sendable {
    let broker: InProcessBroker
    let port: Int
    var scheme = "ws"
    /// SIGHUP, as `rollcall serve` takes it: the token key file is read again.
    var hangup: @Sendable () async -> Void = {}
    var url: String { "\(scheme)://127.0.0.1:\(port)\(WebSocketServer.path)" }

    /// A token for `user`, signed with ``testSecret``, expiring `expiresIn` seconds from now.
    func token(_ user: String, role: String? = nil, expiresIn: Double = 600, secret: String = testSecret)
        async throws -> String
    {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        return try await keys.sign(
            TestClaims(
                sub: .init(value: user), exp: .init(value: Date(timeIntervalSinceNow: expiresIn)), role: role))
    }

    /// A WebSocket client signed in with `token` (in `?token=`), or without one; over TLS, trusting `trust`.
    func client(token: String? = nil, trust: TLSConfiguration? = nil) async throws -> WebSocketTestClient {
        try await WebSocketTestClient.connect(url + (token.map { "?token=\($0)" } ?? ""), tls: trust)
    }
}

/// What the tests put in a token.
struct TestClaims: JWTPayload {
    var sub: SubjectClaim
    var exp: ExpirationClaim
    var role: String?
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Runs `body` with a broker and its WebSocket endpoint (`tokens`: signed with ``testSecret``, or with the keys of
/// `keyFile`; `tls`: a PEM certificate and key), started by the assembly `rollcall serve` uses, then stops both.
func withGateway<T>(
    tokens: Bool = true,
    keyFile: String? = nil,
    tls: (certificate: String, key: String)? = nil,
    _ configure: (inout BrokerConfiguration) -> Void = { _ in },
    _ body: (GatewayHarness) async throws -> T
) async throws -> T {
    var configuration = BrokerConfiguration()
    configuration.commandEndpoint = "tcp://127.0.0.1:*"
    configuration.updateEndpoint = "tcp://127.0.0.1:*"
    configure(&configuration)
    configuration.webSocket.endpoint = "127.0.0.1:0"
    let secretFile = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-jwt-\(UUID())").path
    defer { try? FileManager.default.removeItem(atPath: secretFile) }
    if let keyFile {
        configuration.webSocket.jwtKeyFile = keyFile
    } else if tokens {
        try Data(testSecret.utf8).write(to: URL(fileURLWithPath: secretFile))
        configuration.webSocket.jwtKeyFile = secretFile
    }
    configuration.webSocket.tlsCertFile = tls?.certificate
    configuration.webSocket.tlsKeyFile = tls?.key
    var logger = Logger(label: "test-gateway")
    logger.logLevel = .critical
    let server = try await RollCallServer(ServerConfiguration(broker: configuration), logger: logger)
    let group = server.serviceGroup(logger: logger)
    let running = Task { try await group.run() }
    do {
        let started = ContinuousClock.now
        while !server.broker.isRunning || server.webSocketAddress == nil {
            guard ContinuousClock.now < started + .seconds(10) else {
                throw TestFailure("the broker and its WebSocket endpoint did not start")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
        let port = try #require(server.webSocket?.port)
        let result = try await body(
            GatewayHarness(
                broker: InProcessBroker(broker: server.broker), port: port, scheme: tls == nil ? "ws" : "wss",
                hangup: { await server.received(.hangup) }))
        await group.triggerGracefulShutdown()
        try await running.value
        return result
    } catch {
        await group.triggerGracefulShutdown()
        _ = try? await running.value
        throw error
    }
}

/// A WebSocket client on hummingbird-websocket's WebSocketClient: what it receives is queued for ``next(timeout:)``,
/// and how the server closed it is kept.
final class WebSocketTestClient: Sendable {
    fileprivate let inbox = Inbox()
    private let outgoing: AsyncStream<String?>.Continuation
    fileprivate let connection: Task<WebSocketCloseFrame?, any Error>

    private init(url: String, tls: TLSConfiguration?) {
        let (stream, outgoing) = AsyncStream<String?>.makeStream()
        self.outgoing = outgoing
        let inbox = self.inbox
        var logger = Logger(label: "test-ws-client")
        logger.logLevel = .critical
        connection = Task {
            defer { inbox.finish() }
            // An IP address cannot be a TLS server name (SNI): the tests' certificate names localhost.
            let configuration = WebSocketClientConfiguration(sniHostname: tls == nil ? nil : "localhost")
            return try await WebSocketClient.connect(
                url: url, configuration: configuration, tlsConfiguration: tls, logger: logger
            ) { inbound, outbound, _ in
                try await WebSocketPump.run(inbound: inbound, outbound: outbound, sending: stream) { inbox.put($0) }
            }
        }
    }

    /// Connects, and waits for the connection to be usable (a `ping` answered).
    static func connect(_ url: String, tls: TLSConfiguration? = nil) async throws -> WebSocketTestClient {
        let client = WebSocketTestClient(url: url, tls: tls)
        try await client.send(#"{"op":"ping","id":"connected"}"#)
        guard let reply = try await client.next(timeout: 5_000), reply.contains(#""id":"connected""#) else {
            let ended = client.inbox.isFinished ? await client.connection.result : nil
            throw TestFailure(
                "no answer to the first ping; the connection ended with \(ended.map { "\($0)" } ?? "nothing")")
        }
        return client
    }

    func send(_ text: String) async throws { outgoing.yield(text) }

    /// Sends a request and returns its reply (the next frame whose `id` is `id`), skipping updates.
    func call(_ request: String, id: String, timeout: Int = 5_000) async throws -> [JSONKey: JSON] {
        try await send(request)
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while let text = try await next(until: deadline) {
            guard case .object(let fields) = try JSONParser.parse(text) else { continue }
            if fields[JSONKey("id")] == .string(id) { return fields }
        }
        throw TestFailure("no reply to \(id) within \(timeout) ms")
    }

    /// The next frame that satisfies `matching` within `timeout` ms.
    func expect(timeout: Int = 5_000, _ matching: (String) -> Bool) async throws -> String {
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while let text = try await next(until: deadline) {
            if matching(text) { return text }
        }
        throw TestFailure("no matching frame within \(timeout) ms")
    }

    /// The next frame within `timeout` ms; `nil` if none came or the connection ended.
    func next(timeout: Int) async throws -> String? {
        try await next(until: ContinuousClock.now + .milliseconds(timeout))
    }

    private func next(until deadline: ContinuousClock.Instant) async throws -> String? {
        await inbox.next(until: deadline)
    }

    /// Closes the connection with a close frame.
    func close() { outgoing.yield(nil) }

    /// The close code the connection ended with, waiting at most `timeout` ms; `nil` if it is still open then.
    func closeCode(timeout: Int) async -> UInt16? {
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while ContinuousClock.now < deadline {
            if inbox.isFinished {
                guard let frame = try? await connection.value else { return 0 }
                return UInt16(webSocketErrorCode: frame.closeCode)
            }
            _ = await inbox.next(until: min(deadline, ContinuousClock.now + .milliseconds(50)))
        }
        return nil
    }
}

/// Frames received, for one reader that waits with a deadline.
private final class Inbox: Sendable {
    private struct State {
        var frames = Deque<String>()
        var finished = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    func put(_ text: String) {
        let waiter = state.withLock { s in
            s.frames.append(text)
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }

    func finish() {
        let waiter = state.withLock { s in
            s.finished = true
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }

    var isFinished: Bool { state.withLock { $0.finished } }

    func next(until deadline: ContinuousClock.Instant) async -> String? {
        while ContinuousClock.now < deadline {
            if let frame = state.withLock({ $0.frames.popFirst() }) { return frame }
            if isFinished { return nil }
            // Woken by a frame, the end, or a timer at the deadline.
            let timer = Task {
                try await Task.sleep(until: deadline, clock: .continuous)
                self.wake()
            }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { s -> Bool in
                    if !s.frames.isEmpty || s.finished { return true }
                    s.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
            timer.cancel()
        }
        return state.withLock { $0.frames.popFirst() }
    }

    private func wake() {
        let waiter = state.withLock { s in
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }
}

/// A WebSocket client by hand on a plain TCP socket: it does the upgrade and then only what the test says. It never
/// answers a ping, never reads unless told, and can vanish without a close frame, like a killed app.
final class RawWebSocket {
    private(set) var descriptor: Int32

    /// Connects to 127.0.0.1:`port` and sends the upgrade request for `path` (nothing if `nil`); `receiveBuffer`
    /// shrinks the kernel's receive buffer (a reader that cannot keep up).
    init(port: Int, path: String?, receiveBuffer: Int32? = nil) throws {
        descriptor = try connectLoopback(port: port, receiveBuffer: receiveBuffer)
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard let path else { return }  // a connection that sends nothing (yet)
        let request =
            "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        try write(Array(request.utf8))
    }

    deinit { if descriptor >= 0 { Glibc.close(descriptor) } }

    /// Vanishes as a killed process does: the kernel closes the socket (a reset, since nothing is read), and no
    /// close frame is sent.
    func kill() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        Glibc.close(descriptor)
        descriptor = -1
    }

    /// The HTTP status of the answer to the upgrade request.
    func status() throws -> Int {
        var head: [UInt8] = []
        var byte: UInt8 = 0
        while !head.ends(with: Array("\r\n\r\n".utf8)) {
            guard recv(descriptor, &byte, 1, 0) == 1 else { break }
            head.append(byte)
        }
        let line = String(decoding: head.prefix { $0 != 13 }, as: UTF8.self)
        guard line.hasPrefix("HTTP/1.1 "), let code = Int(line.dropFirst(9).prefix(3)) else {
            throw TestFailure("no HTTP status line: '\(line)'")
        }
        return code
    }

    /// Sends one masked text frame (shorter than 126 bytes).
    func send(_ text: String) throws {
        let payload = Array(text.utf8)
        precondition(payload.count < 126)
        let mask: [UInt8] = [1, 2, 3, 4]
        try write([0x81, 0x80 | UInt8(payload.count)] + mask + payload.enumerated().map { $1 ^ mask[$0 % 4] })
    }

    /// Reads and discards until the server closes the connection; the bytes read, or `nil` if still open at the
    /// deadline.
    func drainUntilClosed(timeout: Int) -> Int? {
        var tenth = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &tenth, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var total = 0
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while ContinuousClock.now < deadline {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { return total }
            if count > 0 { total += count }
        }
        return nil
    }

    /// Sends `bytes` as they are: half a request, or a frame the server must refuse.
    func sendRaw(_ bytes: [UInt8]) throws { try write(bytes) }

    /// Reads until the server closes the connection; everything read, or `nil` if still open at the deadline.
    func readUntilClosed(timeout: Int) -> [UInt8]? {
        var tenth = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &tenth, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var read: [UInt8] = []
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while ContinuousClock.now < deadline {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { return read }
            if count > 0 { read += buffer[..<count] }
        }
        return nil
    }

    private func write(_ bytes: [UInt8]) throws {
        guard Glibc.send(descriptor, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else {
            throw TestFailure("send() failed: errno \(errno)")
        }
    }
}

extension Array where Element == UInt8 {
    fileprivate func ends(with suffix: [UInt8]) -> Bool {
        count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix
    }
}
