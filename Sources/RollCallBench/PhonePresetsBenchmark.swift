import Foundation
import RollCallTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// W5: the cost of the phone presets (docs/swift-sdk.md, docs/websocket.md §5): idle phones, each one WebSocket with
/// one session kept alive by its connection (`"keepalive":"connection"`), sending nothing but the pongs their
/// WebSocket stack answers to the broker's pings. How fast a silent network loss is noticed is set by
/// `--ws-ping-ms` alone (offline within twice it, plus the grace period); what that costs is the broker's CPU and
/// each phone's pings an hour, measured here for one interval.
extension PresenceBenchmarks {
    public func idlePhones(phones: Int, pingMilliseconds: Int, processes: Int, seconds: Double) throws -> BenchRow {
        let (broker, port) = try webSocketBroker([
            "--ws-max-connections", "\(phones + 100)", "--ws-ping-ms", "\(pingMilliseconds)",
        ])
        defer { broker.stop() }
        log("idle phones: \(phones) WebSocket sessions, pings every \(pingMilliseconds) ms")
        let own = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        var clients: [ClientProcess] = []
        defer { for client in clients { client.stop() } }
        var first = 0
        for index in 0..<processes {
            let count = phones / processes + (index < phones % processes ? 1 : 0)
            clients.append(
                try ClientProcess(
                    own,
                    [
                        "ws-clients", "--port", "\(port)", "--first", "\(first)", "--connections", "\(count)",
                        "--sessions", "\(count)", "--seconds", "\(seconds)", "--idle",
                    ]))
            first += count
        }
        for client in clients {
            guard let line = client.line(timeout: 120), line.hasPrefix("ready") else {
                throw BenchError("a client process did not get its phones online")
            }
        }
        let cpu = broker.cpuSeconds()
        let start = ContinuousClock.now
        for client in clients { client.send("go") }
        var pings = 0
        var closed = 0
        for client in clients {
            guard let line = client.line(timeout: seconds + 60), line.hasPrefix("done") else {
                throw BenchError("a client process did not finish")
            }
            for field in line.split(separator: " ").dropFirst() {
                let pair = field.split(separator: "=")
                guard pair.count == 2, let value = Int(pair[1]) else { continue }
                if pair[0] == "pings" { pings += value }
                if pair[0] == "closed" { closed += value }
            }
        }
        let wall = (ContinuousClock.now - start).seconds
        let used = broker.cpuSeconds() - cpu
        let percent = used / wall * 100
        let perTenThousand = percent * 10_000 / Double(phones)
        let pingsPerHour = Double(pings) / Double(phones) / wall * 3_600
        return BenchRow(
            id: "W5.phones-ping-\(pingMilliseconds)ms",
            scenario:
                "\(n(Double(phones))) idle phones (one WebSocket session each, keepalive by connection), "
                + "--ws-ping-ms \(pingMilliseconds): offline within \(f(Double(2 * pingMilliseconds) / 1_000, 1)) s "
                + "of a silent network loss",
            figures: [
                "broker_cpu_percent": percent, "cpu_percent_per_10k_phones": perTenThousand,
                "pings_per_hour_per_phone": pingsPerHour, "closed": Double(closed),
            ],
            summary:
                "broker CPU **\(f(percent, 2)) %** of a core (**\(f(perTenThousand, 2)) % per 10,000 phones**); "
                + "**\(n(pingsPerHour)) pings an hour per phone** (each answered with a pong); "
                + "\(closed) connections cut")
    }
}

extension WebSocketClients {
    /// The client side of W5, `rollcall-bench ws-clients --idle`: one session per connection, kept alive by it
    /// (users `w5-<first + index>`); prints `ready`, and answers the broker's pings from then on, as a phone's
    /// WebSocket stack does (also while it waits for the other client processes); a line on its standard input
    /// starts `seconds` of counting, then it prints `done pings=N closed=N` (`closed`: connections the broker cut).
    public static func runIdle(port: Int, first: Int, connections: Int, seconds: Double) throws {
        var sockets: [BenchWebSocket] = []
        sockets.reserveCapacity(connections)
        for index in 0..<connections {
            let socket = try BenchWebSocket(port: port)
            try socket.send(
                #"{"op":"hello","id":\#(index),"user":"w5-\#(first + index)","keepalive":"connection"}"#)
            guard try socket.receive(count: 1, timeout: 10).first != nil else {
                throw BenchError("no answer to hello \(first + index)")
            }
            sockets.append(socket)
            // Phones opened earlier are pinged while later ones open: they answer as they would.
            if index % 200 == 199 { for open in sockets { _ = try? open.answerPings() } }
        }
        print("ready")
        fflush(nil)
        var open = Set(sockets.indices)
        // Standard input first (the go line), then every phone's socket.
        var descriptors =
            [pollfd(fd: 0, events: Int16(POLLIN), revents: 0)]
            + sockets.map { pollfd(fd: $0.descriptor, events: Int16(POLLIN), revents: 0) }
        var end: ContinuousClock.Instant?
        var pings = 0
        while end.map({ ContinuousClock.now < $0 }) ?? true {
            guard poll(&descriptors, nfds_t(descriptors.count), 100) > 0 else { continue }
            if end == nil, descriptors[0].revents != 0 {
                _ = readLine()
                end = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
                descriptors[0].fd = -1
            }
            for index in sockets.indices where descriptors[index + 1].revents != 0 && open.contains(index) {
                do {
                    let answered = try sockets[index].answerPings()
                    if end != nil { pings += answered }
                } catch {
                    open.remove(index)  // the broker cut it: counted as closed
                    descriptors[index + 1].fd = -1
                }
            }
        }
        print("done pings=\(pings) closed=\(sockets.count - open.count)")
        fflush(nil)
        for socket in sockets { socket.close() }
    }
}
