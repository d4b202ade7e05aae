import Foundation
import RollCallTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// W4: many WebSocket sessions at rest, each heartbeating every second, from several client processes: a process
/// may hold at most 20,000 open files here (a hard limit), so neither the broker nor one client can hold 20,000
/// sockets. The broker's CPU share and memory are measured while they heartbeat.
extension PresenceBenchmarks {
    public func webSocketSessions(connections: Int, sessions: Int, processes: Int, seconds: Double) throws -> BenchRow {
        let (broker, port) = try webSocketBroker(["--ws-max-connections", "\(connections + 100)"])
        defer { broker.stop() }
        Thread.sleep(forTimeInterval: 0.5)
        let idle = broker.residentBytes()
        log("websocket sessions: \(sessions) sessions over \(connections) connections from \(processes) processes")
        let own = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        var clients: [ClientProcess] = []
        defer { for client in clients { client.stop() } }
        var firstSession = 0
        for index in 0..<processes {
            let connectionCount = connections / processes + (index < connections % processes ? 1 : 0)
            let sessionCount = sessions / processes + (index < sessions % processes ? 1 : 0)
            clients.append(
                try ClientProcess(
                    own,
                    [
                        "ws-clients", "--port", "\(port)", "--first", "\(firstSession)", "--connections",
                        "\(connectionCount)", "--sessions", "\(sessionCount)", "--seconds", "\(seconds)",
                    ]))
            firstSession += sessionCount
        }
        for client in clients {
            guard let line = client.line(timeout: 120), line.hasPrefix("ready") else {
                throw BenchError("a client process did not get its sessions open")
            }
        }
        let resident = broker.residentBytes()
        log("websocket sessions: all open; heartbeating for \(seconds) s")
        let cpu = broker.cpuSeconds()
        let clientCPU = clients.map { ProcessStats.cpuSeconds(pid: $0.pid) }.reduce(0, +)
        let start = ContinuousClock.now
        for client in clients { client.send("go") }
        var sent = 0
        var answered = 0
        var failed = 0
        for client in clients {
            guard let line = client.line(timeout: seconds + 60), line.hasPrefix("done") else {
                throw BenchError("a client process did not finish")
            }
            let fields = Dictionary(
                uniqueKeysWithValues: line.split(separator: " ").dropFirst().compactMap { field in
                    let pair = field.split(separator: "=")
                    return pair.count == 2 ? (String(pair[0]), Int(pair[1]) ?? 0) : nil
                })
            sent += fields["sent"] ?? 0
            answered += fields["ok"] ?? 0
            failed += fields["failed"] ?? 0
        }
        let wall = (ContinuousClock.now - start).seconds
        let used = broker.cpuSeconds() - cpu
        let clientsUsed = clients.map { ProcessStats.cpuSeconds(pid: $0.pid) }.reduce(0, +) - clientCPU
        let perSession = Double(resident - idle) / Double(sessions)
        return BenchRow(
            id: "W4.sessions-\(sessions / 1_000)k",
            scenario:
                "\(n(Double(sessions))) WebSocket sessions over \(n(Double(connections))) connections "
                + "(\(processes) client processes), each heartbeating every second",
            figures: [
                "broker_cpu_percent": used / wall * 100, "clients_cpu_percent": clientsUsed / wall * 100,
                "rss_bytes": Double(resident), "bytes_per_session": perSession,
                "heartbeats_per_second": Double(sent) / wall, "answered": Double(answered), "failed": Double(failed),
            ],
            summary:
                "broker CPU **\(f(used / wall * 100, 1)) %** of a core at \(n(Double(sent) / wall)) heartbeats/s "
                + "(clients \(f(clientsUsed / wall * 100, 1)) %); RSS \(f(Double(resident) / 1_048_576, 1)) MB, "
                + "**\(n(perSession)) bytes/session** (connection included) over idle "
                + "\(f(Double(idle) / 1_048_576, 1)) MB; \(n(Double(answered))) of \(n(Double(sent))) answered ok, "
                + "\(failed) failed")
    }
}

/// A child process of the benchmark, spoken to by lines on its standard input and output.
final class ClientProcess {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private var buffer: [UInt8] = []
    var pid: Int32 { process.processIdentifier }

    init(_ executable: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    /// The next line it prints, or `nil` if none within `timeout` seconds.
    func line(timeout: Double) -> String? {
        let descriptor = output.fileHandleForReading.fileDescriptor
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1_000))
        while ContinuousClock.now < deadline {
            if let end = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeFirst(end + 1)
                return line
            }
            var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
            guard poll(&descriptors, 1, 100) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4_096)
            let count = read(descriptor, &chunk, chunk.count)
            guard count > 0 else { return nil }
            buffer += chunk.prefix(count)
        }
        return nil
    }

    func send(_ line: String) { input.fileHandleForWriting.write(Data((line + "\n").utf8)) }

    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }
}

/// The client side of W4, run as `rollcall-bench ws-clients` in a child process: opens `connections` WebSocket
/// connections, says hello for `sessions` sessions (users `w4-<first + index>`, spread over the connections, TTL 5 s),
/// prints `ready`, waits for a line on its standard input, heartbeats every session once a second, evenly spread,
/// for `seconds`, and prints `done sent=N ok=N failed=N`.
public enum WebSocketClients {
    public static func run(port: Int, first: Int, connections: Int, sessions: Int, seconds: Double) throws {
        var sockets: [BenchWebSocket] = []
        sockets.reserveCapacity(connections)
        for _ in 0..<connections { sockets.append(try BenchWebSocket(port: port)) }
        var heartbeats: [String] = []
        heartbeats.reserveCapacity(sessions)
        // Hellos a connection at a time in rounds: one session per connection per round.
        var index = 0
        while index < sessions {
            let round = index..<min(sessions, index + connections)
            for session in round {
                try sockets[session % connections].send(
                    #"{"op":"hello","id":\#(session),"user":"w4-\#(first + session)","ttl_ms":5000}"#)
            }
            for session in round {
                guard let reply = try sockets[session % connections].receive(count: 1, timeout: 10).first,
                    let id = field("session", in: reply)
                else { throw BenchError("no answer to hello \(first + session)") }
                heartbeats.append(#"{"op":"heartbeat","session":"\#(id)"}"#)
            }
            index = round.upperBound
        }
        print("ready")
        fflush(nil)
        _ = readLine()
        let start = ContinuousClock.now
        let rounds = Int(seconds.rounded(.up))
        var sent = 0
        var answered = 0
        var failed = 0
        var chunk = [UInt8](repeating: 0, count: 65_536)
        func drain() {
            for socket in sockets {
                while true {
                    let count = recv(socket.descriptor, &chunk, chunk.count, Int32(MSG_DONTWAIT))
                    guard count > 0 else { break }
                    answered += occurrences(of: #""ok":true"#, in: chunk[..<count])
                    failed += occurrences(of: #""ok":false"#, in: chunk[..<count])
                }
            }
        }
        for round in 0..<rounds {
            for (session, heartbeat) in heartbeats.enumerated() {
                pace(
                    until: start
                        + .nanoseconds(Int64((Double(round) + Double(session) / Double(sessions)) * 1e9)))
                try sockets[session % connections].send(heartbeat)
                sent += 1
                if session % 1_000 == 999 { drain() }
            }
            drain()
        }
        Thread.sleep(forTimeInterval: 0.1)  // the last replies
        drain()
        print("done sent=\(sent) ok=\(answered) failed=\(failed)")
        fflush(nil)
        for socket in sockets { socket.close() }
    }

    /// The string value of `"name":"…"` in a JSON reply.
    private static func field(_ name: String, in bytes: [UInt8]) -> String? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let range = text.range(of: "\"\(name)\":\"") else { return nil }
        let rest = text[range.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }

    private static func occurrences(of needle: String, in bytes: ArraySlice<UInt8>) -> Int {
        let pattern = Array(needle.utf8)
        guard bytes.count >= pattern.count else { return 0 }
        var found = 0
        var index = bytes.startIndex
        while index <= bytes.endIndex - pattern.count {
            if bytes[index] == pattern[0], bytes[index..<(index + pattern.count)].elementsEqual(pattern) {
                found += 1
                index += pattern.count
            } else {
                index += 1
            }
        }
        return found
    }
}
