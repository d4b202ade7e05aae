import Foundation
import RollCallTestSupport
import ZeroMQ

#if canImport(Glibc)
    import Glibc
#endif

/// The WebSocket scenarios of `rollcall bench` (docs/websocket.md), against a `rollcall serve` child process with
/// `--ws-endpoint` on loopback and no tokens. The clients are plain blocking sockets speaking just enough of RFC 6455,
/// so that what is measured is the broker, not a client library.
extension PresenceBenchmarks {
    /// A broker with a WebSocket endpoint on a free loopback port; its port. With `--jwt-key-file` among the
    /// arguments, `token` is one the key signed, for the probe that waits until the endpoint accepts.
    func webSocketBroker(_ arguments: [String] = [], startTimeout: Double = 10, token: String? = nil) throws -> (
        BrokerProcess, Int
    ) {
        let port = try freePort()
        let broker = try broker(["--ws-endpoint", "127.0.0.1:\(port)"] + arguments, startTimeout: startTimeout)
        // The WebSocket server starts beside the loop: wait until it accepts.
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if let probe = try? BenchWebSocket(port: port, token: token) {
                probe.close()
                return (broker, port)
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        broker.stop()
        throw BenchError("the WebSocket endpoint did not start on port \(port)")
    }

    // MARK: W1. Latency

    /// A status change from a ZeroMQ client to a WebSocket subscriber and a ZeroMQ subscriber of the same user, one
    /// change at a time: each delivery timed on both.
    public func webSocketLatency(changes: Int) throws -> BenchRow {
        let (broker, port) = try webSocketBroker()
        defer { broker.stop() }
        let pipeline = try RequestPipeline(endpoint: broker.command)
        let session = try openSessions(pipeline, users: ["lat"])[0]
        let ws = try BenchWebSocket(port: port)
        try ws.send(#"{"op":"subscribe","id":1,"topics":["presence/lat/"]}"#)
        _ = try ws.receive(count: 2, timeout: 5)  // the reply and the last value
        let context = try Context()
        let sub = try Socket(context, .sub)
        try sub.set(.linger(milliseconds: 0))
        try sub.set(.subscribe(Array("presence/lat/".utf8)))
        try sub.connect(broker.update)
        var poller = Poller([sub])
        guard try poller.poll(timeout: 5_000)[0] else { throw BenchError("no last value on the update endpoint") }
        // The ZeroMQ subscription's last value is published, so it reaches the WebSocket too: let replays pass.
        Thread.sleep(forTimeInterval: 0.3)
        while try sub.receiveMessage() != nil {}
        _ = try ws.receive(count: 1_000, timeout: 0)
        log("websocket latency: \(changes) changes, one at a time")
        var overWebSocket = LatencyHistogram()
        var overZeroMQ = LatencyHistogram()
        for _ in 0..<changes {
            let stamp = monotonicNanoseconds()
            let needle = Array("b\(stamp)".utf8)
            try pipeline.send(Self.timedChange(session, stamp: stamp))
            // The ZeroMQ subscriber first, then the WebSocket, whose frame waits in its socket meanwhile: each is
            // timed when it is read, so the WebSocket's figure includes the ZeroMQ read (a few µs).
            var seen = false
            while !seen {
                guard try poller.poll(timeout: 5_000)[0], let (frames, _) = try sub.receiveMessage() else {
                    throw BenchError("a change never reached the ZeroMQ subscriber")
                }
                seen = frames.count == 2 && contains(frames[1].bytes, needle)
            }
            overZeroMQ.record(microseconds: (monotonicNanoseconds() - stamp) / 1_000)
            seen = false
            while !seen {
                let frames = try ws.receive(count: 1, timeout: 5)
                guard let frame = frames.first else { throw BenchError("a change never reached the WebSocket") }
                seen = contains(frame, needle)
            }
            overWebSocket.record(microseconds: (monotonicNanoseconds() - stamp) / 1_000)
            try pipeline.drain()
        }
        var figures = overWebSocket.figures()
        figures.merge(overZeroMQ.figures(prefix: "zmq_"), uniquingKeysWith: { $1 })
        return BenchRow(
            id: "W1.latency", scenario: "status change → WebSocket subscriber (and a ZeroMQ one, same changes)",
            figures: figures,
            summary:
                "WebSocket \(overWebSocket.summary); ZeroMQ p50/p99 \(f(overZeroMQ.milliseconds(at: 50) * 1_000, 0))/"
                + "\(f(overZeroMQ.milliseconds(at: 99) * 1_000, 0)) µs",
            histogram: overWebSocket.distribution)
    }

    // MARK: W2. Memory per connection

    /// `count` idle WebSocket connections, each with a session kept alive by it and one subscription: the broker's
    /// resident memory per connection.
    public func webSocketMemory(count: Int) throws -> BenchRow {
        let (broker, port) = try webSocketBroker()
        defer { broker.stop() }
        // A first batch warms the allocator and SwiftNIO's pools, so that the figure is per connection.
        var sockets = try (0..<50).map { try self.openIdle(port: port, user: "warm\($0)") }
        Thread.sleep(forTimeInterval: 0.5)
        let before = broker.residentBytes()
        log("websocket memory: \(count) idle connections, each with a session and a subscription")
        for index in 0..<count { sockets.append(try openIdle(port: port, user: "idle\(index)")) }
        Thread.sleep(forTimeInterval: 1)
        let after = broker.residentBytes()
        let perConnection = Double(after - before) / Double(count)
        for socket in sockets { socket.close() }
        return BenchRow(
            id: "W2.memory-\(count)",
            scenario: "\(n(Double(count))) idle WebSocket connections, a session and a subscription each",
            figures: [
                "bytes_per_connection": perConnection, "rss_before_bytes": Double(before),
                "rss_after_bytes": Double(after),
            ],
            summary: "**\(n(perConnection)) bytes per connection** (RSS \(n(Double(before) / 1_048_576)) → "
                + "\(n(Double(after) / 1_048_576)) MiB)")
    }

    private func openIdle(port: Int, user: String) throws -> BenchWebSocket {
        let ws = try BenchWebSocket(port: port)
        try ws.send(#"{"op":"hello","id":1,"user":"\#(user)","keepalive":"connection"}"#)
        try ws.send(#"{"op":"subscribe","id":2,"topics":["presence/\#(user)/"]}"#)
        // The online update, the hello's reply, the subscribe's reply; the last value may come later (coalesced).
        guard try ws.receive(count: 3, timeout: 5).count == 3 else {
            throw BenchError("an idle connection got no replies")
        }
        return ws
    }

    // MARK: W3. Fan-out

    /// One user's change delivered to `count` WebSocket subscribers of that user's topic.
    public func webSocketFanout(subscribers count: Int, changes: Int) throws -> BenchRow {
        let (broker, port) = try webSocketBroker()
        defer { broker.stop() }
        let pipeline = try RequestPipeline(endpoint: broker.command)
        let session = try openSessions(pipeline, users: ["wsfan"])[0]
        let sockets = try (0..<count).map { _ in
            let ws = try BenchWebSocket(port: port)
            try ws.send(#"{"op":"subscribe","topics":["presence/wsfan/"]}"#)
            return ws
        }
        // Every subscriber has its reply; then everything replayed so far is drained.
        for ws in sockets { guard try !ws.receive(count: 1, timeout: 10).isEmpty else { throw BenchError("no reply") } }
        Thread.sleep(forTimeInterval: 0.3)
        for ws in sockets { _ = try ws.receive(count: 1_000, timeout: 0) }
        log("websocket fan-out: \(changes) changes to \(count) subscribers")
        let (perDelivery, toAll, missed) = try fanOut(sockets, pipeline: pipeline, session: session, changes: changes)
        for ws in sockets { ws.close() }
        var figures = perDelivery.figures()
        figures.merge(toAll.figures(prefix: "all_"), uniquingKeysWith: { $1 })
        figures["missed"] = Double(missed)
        return BenchRow(
            id: "W3.fanout-\(count)",
            scenario: "one change → \(n(Double(count))) WebSocket subscribers of the same user (\(changes) changes)",
            figures: figures,
            summary: "per delivery \(perDelivery.summary); to the last subscriber p50 "
                + "**\(f(toAll.milliseconds(at: 50), 2)) ms**, max \(f(toAll.maxMilliseconds, 2)) ms; \(missed) missed",
            histogram: perDelivery.distribution)
    }

    /// `changes` timed changes of `session`'s user, one at a time, each awaited on every socket (5 s at most): the
    /// time to each delivery, the time to the last socket, and the deliveries that never came.
    func fanOut(_ sockets: [BenchWebSocket], pipeline: RequestPipeline, session: String, changes: Int) throws -> (
        perDelivery: LatencyHistogram, toAll: LatencyHistogram, missed: Int
    ) {
        var fds = sockets.map { pollfd(fd: $0.descriptor, events: Int16(POLLIN), revents: 0) }
        return try FanOut.time(receivers: sockets.count, pipeline: pipeline, session: session, changes: changes) {
            pending, stamp in
            guard poll(&fds, nfds_t(fds.count), 100) > 0 else { return [] }
            let needle = Array("b\(stamp)".utf8)
            var arrived: [(index: Int, at: UInt64)] = []
            for index in pending where fds[index].revents != 0 {
                for frame in try sockets[index].receive(count: 1_000, timeout: 0) where contains(frame, needle) {
                    arrived.append((index, monotonicNanoseconds()))
                }
            }
            return arrived
        }.results
    }

    func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { Glibc.close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        guard bound else { throw BenchError("no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A blocking WebSocket client on a plain TCP socket: the upgrade, masked text frames out, text frames in.
final class BenchWebSocket {
    let descriptor: Int32
    private var buffer: [UInt8] = []

    /// Upgrades at `/v1/ws`, with `?token=` when a token is given (a broker with `--jwt-key-file`).
    init(port: Int, token: String? = nil) throws {
        descriptor = try connectLoopback(port: port)
        var one: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let target = "/v1/ws" + (token.map { "?token=\($0)" } ?? "")
        try write(
            Array(
                ("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").utf8))
        // The 101 head, up to its blank line.
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            if let end = headEnd() {
                guard buffer.starts(with: Array("HTTP/1.1 101".utf8)) else {
                    Glibc.close(descriptor)
                    throw BenchError("upgrade refused: \(String(decoding: buffer.prefix(40), as: UTF8.self))")
                }
                buffer.removeFirst(end)
                return
            }
            guard try fill(timeout: 100) else { continue }
        }
        Glibc.close(descriptor)
        throw BenchError("no answer to the upgrade")
    }

    func close() { Glibc.close(descriptor) }

    /// Sends one masked text frame.
    func send(_ text: String) throws {
        let payload = Array(text.utf8)
        var frame: [UInt8] = [0x81]
        if payload.count < 126 {
            frame.append(0x80 | UInt8(payload.count))
        } else {
            frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        }
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        frame += mask
        frame += payload.enumerated().map { $1 ^ mask[$0 & 3] }
        try write(frame)
    }

    /// Text frames received within `timeout` seconds, at most `count`, returning early once it has `count`; pings
    /// and other control frames are skipped.
    func receive(count: Int, timeout: Double) throws -> [[UInt8]] {
        var frames: [[UInt8]] = []
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1_000))
        while frames.count < count {
            while frames.count < count, let frame = takeFrame() {
                if let frame { frames.append(frame) }
            }
            if frames.count >= count { break }
            let left = ContinuousClock.now.duration(to: deadline)
            let milliseconds = Int(
                left.components.seconds * 1_000 + left.components.attoseconds / 1_000_000_000_000_000)
            guard try fill(timeout: max(0, milliseconds)) else {
                if ContinuousClock.now >= deadline { break }
                continue
            }
        }
        return frames
    }

    /// Answers every ping that has arrived with its pong, as a phone's WebSocket stack does, without waiting; the
    /// number answered. Text frames that arrive meanwhile are dropped.
    func answerPings() throws -> Int {
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while true {
            let read = recv(descriptor, &chunk, chunk.count, Int32(MSG_DONTWAIT))
            if read == 0 { throw BenchError("the WebSocket closed") }
            guard read > 0 else { break }
            buffer += chunk.prefix(read)
        }
        var answered = 0
        while let (opcode, payload) = takeAnyFrame() {
            guard opcode == 0x9 else { continue }
            let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
            try write([0x8A, 0x80 | UInt8(payload.count)] + mask + payload.enumerated().map { $1 ^ mask[$0 & 3] })
            answered += 1
        }
        return answered
    }

    /// The next whole frame in the buffer: `.some(payload)` for a text frame, `.some(nil)` for a control frame,
    /// `nil` when none is whole yet.
    private func takeFrame() -> [UInt8]?? {
        guard let (opcode, payload) = takeAnyFrame() else { return nil }
        return .some(opcode == 1 ? payload : nil)
    }

    /// The next whole frame in the buffer, with its opcode; `nil` when none is whole yet.
    private func takeAnyFrame() -> (opcode: UInt8, payload: [UInt8])? {
        guard buffer.count >= 2 else { return nil }
        var length = Int(buffer[1] & 0x7F)
        var offset = 2
        if length == 126 {
            guard buffer.count >= 4 else { return nil }
            length = Int(buffer[2]) << 8 | Int(buffer[3])
            offset = 4
        } else if length == 127 {
            guard buffer.count >= 10 else { return nil }
            length = buffer[2..<10].reduce(0) { $0 << 8 | Int($1) }
            offset = 10
        }
        guard buffer.count >= offset + length else { return nil }
        let opcode = buffer[0] & 0x0F
        let payload = Array(buffer[offset..<(offset + length)])
        buffer.removeFirst(offset + length)
        return (opcode, payload)
    }

    /// Reads what has arrived, waiting at most `timeout` ms; whether anything came.
    private func fill(timeout: Int) throws -> Bool {
        var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
        guard poll(&descriptors, 1, Int32(timeout)) > 0 else { return false }
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let read = recv(descriptor, &chunk, chunk.count, 0)
        guard read > 0 else { throw BenchError("the WebSocket closed") }
        buffer += chunk.prefix(read)
        return true
    }

    private func headEnd() -> Int? {
        let marker: [UInt8] = [13, 10, 13, 10]
        guard buffer.count >= 4 else { return nil }
        for index in 0...(buffer.count - 4) where Array(buffer[index..<(index + 4)]) == marker { return index + 4 }
        return nil
    }

    private func write(_ bytes: [UInt8]) throws {
        guard Glibc.send(descriptor, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else {
            throw BenchError("send() failed: errno \(errno)")
        }
    }
}

extension PresenceBenchmarks {
    /// W2's yardstick in the same run: `count` idle ZeroMQ command connections (a DEALER each, 1,000 to a context),
    /// each with a session, as the issue's "ZeroMQ connection" (28 KB in the earlier side-by-side's D3): the
    /// broker's resident memory per connection.
    public func zeroMQMemory(count: Int) throws -> BenchRow {
        let broker = try broker([])
        defer { broker.stop() }
        var contexts: [Context] = []
        var sockets: [Socket] = []
        func open(_ user: String) throws {
            if sockets.count % 1_000 == 0 { contexts.append(try Context()) }
            let socket = try Socket(contexts[contexts.count - 1], .dealer)
            try socket.set(.linger(milliseconds: 0))
            try socket.connect(broker.command)
            try socket.send(Array(#"{"op":"hello","user":"\#(user)","ttl_ms":3600000}"#.utf8), wait: true)
            var poller = Poller([socket])
            guard try poller.poll(timeout: 10_000)[0], try socket.receiveMessage() != nil else {
                throw BenchError("no answer to hello on a ZeroMQ connection")
            }
            sockets.append(socket)
        }
        for index in 0..<50 { try open("zwarm\(index)") }
        Thread.sleep(forTimeInterval: 0.5)
        let before = broker.residentBytes()
        log("zeromq memory: \(count) idle command connections, a session each")
        for index in 0..<count { try open("zidle\(index)") }
        Thread.sleep(forTimeInterval: 1)
        let after = broker.residentBytes()
        let perConnection = Double(after - before) / Double(count)
        sockets = []
        contexts = []
        return BenchRow(
            id: "W2.zmq-\(count)",
            scenario: "\(n(Double(count))) idle ZeroMQ command connections (DEALER), a session each",
            figures: [
                "bytes_per_connection": perConnection, "rss_before_bytes": Double(before),
                "rss_after_bytes": Double(after),
            ],
            summary: "**\(n(perConnection)) bytes per connection** (RSS \(n(Double(before) / 1_048_576)) → "
                + "\(n(Double(after) / 1_048_576)) MiB)")
    }
}
