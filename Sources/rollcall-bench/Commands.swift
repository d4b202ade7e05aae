import ArgumentParser
import Foundation
import RollCallBench

@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollcall-bench",
        abstract: "Measure a broker: starts `rollcall serve` as a child process and drives it over loopback.",
        discussion: """
            Results: docs/benchmarks.md. Run a release build (swift build -c release); the broker is the `rollcall` \
            executable beside this one unless ROLLCALL_BIN names another.
            """,
        subcommands: [
            AllBench.self, GroupsBench.self, ClusterBench.self, WebSocketClientsCommand.self, SDKBench.self,
        ])
}

/// The broker to measure: `ROLLCALL_BIN`, else the `rollcall` executable in this one's directory.
func brokerExecutable() -> String {
    if let given = ProcessInfo.processInfo.environment["ROLLCALL_BIN"], !given.isEmpty { return given }
    let own = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    return own.deletingLastPathComponent().appendingPathComponent("rollcall").path
}

/// Prints one line to standard output at once.
func emit(_ line: String) {
    print(line)
    fflush(nil)
}

/// Reports a failure as one line on standard error and exits non-zero.
func fail(_ error: Error) -> ExitCode {
    FileHandle.standardError.write(Data("rollcall-bench: \(error)\n".utf8))
    return ExitCode(1)
}

/// The presence scenarios, from the benchmark issue, in one run.
struct AllBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "presence",
        abstract:
            "Latency, throughput, sessions at rest, fan-out, crash detection, TTL expiry, WebSocket and idle phones.",
        discussion: """
            --only picks scenarios: codec, latency, throughput, sessions, fanout, crash, expiry, curve (latency \
            and throughput with and without CURVE, one after the other, with their ratios), and history (the \
            presence log on and off, alternating; history reads over 90 days; disk per transition), webhooks (transition \
            to webhook latency at 100 and 5,000 changes/s, delivered events/s), privacy (not in the default set: \
            a contacts file of --privacy-users × --privacy-contacts edges, memory per edge and load time, then a \
            `visibility: contacts` user's change to --privacy-viewers of its contacts watching over WebSocket with \
            `user` tokens, and over ZeroMQ with CURVE `user` keys: public, contacts-only, and with strangers \
            following too). --curve runs every scenario over CURVE.
            """)

    @Flag(help: "A small, fast run that only checks the benchmark works.") var smoke = false
    @Option(help: "Seconds per measured run.") var seconds = 5.0
    @Option(help: "Comma-separated scenarios to run (default: all).") var only: String?
    @Option(help: "Write the rows as JSON to this file.") var json: String?
    @Option(
        parsing: .singleValue,
        help: "An argument added to every broker's serve command (repeat it), such as --broker-arg=--http-endpoint.")
    var brokerArg: [String] = []
    @Flag(help: "Run every scenario's broker and clients with CURVE (generated keys, one operator key).")
    var curve = false
    @Option(help: "privacy: users in the generated contacts file.") var privacyUsers = 100_000
    @Option(help: "privacy: contacts of each user in the file.") var privacyContacts = 200
    @Option(help: "privacy: contacts that watch the `visibility: contacts` user (at most --privacy-contacts).")
    var privacyViewers = 200
    @Option(help: "privacy: status changes timed to every viewer.") var privacyChanges = 200

    func run() async throws {
        let executable = brokerExecutable()
        var bench = PresenceBenchmarks(executable: executable) { line in
            FileHandle.standardError.write(Data("bench: \(line)\n".utf8))
        }
        bench.brokerArguments = brokerArg
        if curve { bench.curve = try CurveSetup.make() }
        let wanted = Set(
            (only ?? "latency,throughput,sessions,fanout,crash,expiry,history,webhooks,websocket,phones").split(
                separator: ","
            )
            .map(
                String.init)
        )
        let seconds = smoke ? 0.5 : self.seconds
        var rows: [BenchRow] = []
        func add(_ row: BenchRow) {
            rows.append(row)
            emit("\(row.id): \(row.summary)")
        }
        do {
            if wanted.contains("codec") { add(CodecBenchmark.run(iterations: smoke ? 10_000 : 500_000)) }
            if wanted.contains("latency") {
                for rate in smoke ? [500] : [500, 1_000, 10_000, 50_000] {
                    add(try bench.latency(rate: rate, seconds: seconds))
                }
            }
            if wanted.contains("throughput") {
                for subscribers in smoke ? [1] : [1, 10] {
                    add(try bench.throughput(subscribers: subscribers, seconds: seconds))
                }
            }
            if wanted.contains("sessions") {
                for count in smoke ? [1_000] : [10_000, 100_000] {
                    add(try bench.sessions(count: count, seconds: smoke ? 1 : max(5, seconds)))
                }
            }
            if wanted.contains("fanout") {
                add(try bench.fanout(subscribers: smoke ? 50 : 1_000, changes: smoke ? 5 : 50))
            }
            if wanted.contains("crash") { add(try bench.crash(trials: smoke ? 10 : 200)) }
            if wanted.contains("curve") {
                // The same scenarios without and with CURVE, back to back in one run: the ratio is what CURVE costs.
                var plain = bench
                plain.curve = nil
                var secured = bench
                secured.curve = try bench.curve ?? CurveSetup.make()
                let rate = smoke ? 500 : 10_000
                var pairs: [(BenchRow, BenchRow)] = []
                for run in [
                    { (b: PresenceBenchmarks) in try b.latency(rate: rate, seconds: seconds) },
                    { (b: PresenceBenchmarks) in try b.throughput(subscribers: 1, seconds: seconds) },
                ] {
                    let without = try run(plain)
                    var with = try run(secured)
                    with.id += "-curve"
                    with.scenario += ", CURVE"
                    add(without)
                    add(with)
                    pairs.append((without, with))
                }
                for (without, with) in pairs {
                    for figure in ["p50_ms", "p99_ms", "per_second", "broker_cpu_percent"] {
                        guard let a = without.figures[figure], let b = with.figures[figure], a > 0 else { continue }
                        emit(
                            "CURVE/none \(without.id) \(figure): " + String(format: "%.2fx (%.3f -> %.3f)", b / a, a, b)
                        )
                    }
                }
            }
            if wanted.contains("history") {
                // The presence log's cost on the hot path (on and off, alternating) and its reads and disk.
                for row in try bench.logOnAndOff(rate: smoke ? 500 : 10_000, seconds: seconds, rounds: smoke ? 1 : 4) {
                    add(row)
                }
                for row in try bench.historyReads(
                    days: smoke ? 3 : 90, perDay: smoke ? 100 : 2_000, others: smoke ? 3_000 : 900_000,
                    reads: smoke ? 100 : 5_000)
                {
                    add(row)
                }
            }
            if wanted.contains("webhooks") {
                for row in try await bench.webhooks(
                    rates: smoke ? [100] : [100, 5_000], seconds: smoke ? 1 : seconds, burst: smoke ? 2_000 : 50_000)
                {
                    add(row)
                }
            }
            if wanted.contains("websocket") {
                add(try bench.webSocketLatency(changes: smoke ? 50 : 2_000))
                add(try bench.webSocketMemory(count: smoke ? 100 : 5_000))
                add(try bench.zeroMQMemory(count: smoke ? 100 : 5_000))
                add(try bench.webSocketFanout(subscribers: smoke ? 50 : 1_000, changes: smoke ? 5 : 50))
                // 19,000 connections: the broker may hold 20,000 open files and needs some of its own.
                add(
                    try bench.webSocketSessions(
                        connections: smoke ? 200 : 19_000, sessions: smoke ? 250 : 20_000, processes: smoke ? 2 : 4,
                        seconds: smoke ? 2 : 10))
            }
            if wanted.contains("phones") {
                // The phone presets (docs/swift-sdk.md): today's battery-first default, then offline within 3 s and
                // within 1 s of a silent network loss.
                for ping in [10_000, 1_500, 500] {
                    add(
                        try bench.idlePhones(
                            phones: smoke ? 100 : 10_000, pingMilliseconds: ping, processes: smoke ? 1 : 2,
                            seconds: smoke ? 1.5 : max(20, Double(3 * ping) / 1_000)))
                }
            }
            if wanted.contains("privacy") {
                let sizes =
                    smoke
                    ? PresenceBenchmarks.PrivacySizes(users: 500, contacts: 20, viewers: 20, changes: 10)
                    : .init(
                        users: privacyUsers, contacts: privacyContacts, viewers: privacyViewers,
                        changes: privacyChanges)
                for row in try bench.privacy(sizes) { add(row) }
                let followers = min(sizes.viewers, sizes.contacts)
                for row in try bench.privacyOverUpdates(viewers: followers, strangers: 10, changes: sizes.changes) {
                    add(row)
                }
            }
            if wanted.contains("expiry") {
                add(try bench.expiry(live: smoke ? 1_000 : 100_000, probes: smoke ? 10 : 200, ttl: smoke ? 500 : 2_000))
            }
        } catch {
            throw fail(error)
        }
        emit("\n" + BenchRow.table(rows))
        for row in rows where row.histogram != nil { emit("\n== \(row.id) (ms)\n\(row.histogram!)") }
        if let json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(rows).write(to: URL(fileURLWithPath: json))
        }
    }
}

struct GroupsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "groups",
        abstract: "Groups under churn: member change to group message latency, broker CPU, memory per group.",
        discussion: """
            Without options it runs the two scenarios of the groups issue: 100,000 groups of 5 over 100,000 users, \
            and 100 groups of 10,000 over 20,000 users (each user in about 50 groups), each with --rate status \
            changes a second. --smoke runs a small, fast version for CI.
            """)

    @Option(help: "Status changes a second.") var rate = 2_000
    @Option(help: "Seconds of churn per scenario.") var seconds = 10.0
    @Flag(help: "A small, fast run that only checks the benchmark works.") var smoke = false
    @Option(help: "Write the results as JSON to this file.") var json: String?

    func run() async throws {
        let executable = brokerExecutable()
        let scenarios: [GroupBenchmark.Parameters] =
            smoke
            ? [
                .init(name: "smoke 200x5", groups: 200, size: 5, pool: 500, rate: 200, seconds: 1),
                .init(name: "smoke 4x200", groups: 4, size: 200, pool: 400, rate: 200, seconds: 1),
            ]
            : [
                .init(name: "100k groups of 5", groups: 100_000, size: 5, pool: 100_000, rate: rate, seconds: seconds),
                .init(name: "100 groups of 10k", groups: 100, size: 10_000, pool: 20_000, rate: rate, seconds: seconds),
            ]
        var results: [GroupBenchmark.Result] = []
        for scenario in scenarios {
            let result = try GroupBenchmark(scenario, executable: executable).run { line in
                FileHandle.standardError.write(Data("bench: \(line)\n".utf8))
            }
            results.append(result)
            emit("\n== \(result.scenario): member change -> group message latency (ms)\n\(result.histogram)")
        }
        emit(GroupTable.render(results))
        if let json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(results).write(to: URL(fileURLWithPath: json))
        }
        if results.contains(where: { $0.failures > 0 || $0.changedEntries == 0 }) {
            throw fail(BenchError("some requests failed or no group message arrived"))
        }
    }
}

enum GroupTable {
    static func render(_ results: [GroupBenchmark.Result]) -> String {
        var lines = [
            "| scenario | memberships | changes/s | group msgs/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | broker CPU | RSS | bytes/group | bytes/membership |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in results {
            let cells = [
                r.scenario, "\(r.memberships)", format(Double(r.changesSent) / r.seconds, 0),
                format(Double(r.groupMessages) / r.seconds, 0), format(r.latencyMs["p50"]!, 2),
                format(r.latencyMs["p90"]!, 2), format(r.latencyMs["p99"]!, 2), format(r.latencyMs["p99.9"]!, 2),
                format(r.latencyMs["max"]!, 2), format(r.brokerCPUPercent, 1) + " %",
                format(Double(r.rssWithGroupsBytes) / 1_048_576, 1) + " MB", format(r.bytesPerGroup, 0),
                format(r.bytesPerMembership, 0),
            ]
            lines.append("| " + cells.joined(separator: " | ") + " |")
        }
        return lines.joined(separator: "\n")
    }

    static func format(_ value: Double, _ digits: Int) -> String { String(format: "%.\(digits)f", value) }
}

/// The client processes of W4 (many WebSocket sessions heartbeating): started by the benchmark itself.
struct WebSocketClientsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ws-clients",
        abstract: "W4's client side: WebSocket sessions heartbeating every second (started by `presence`).",
        shouldDisplay: false)

    @Option(help: "The broker's WebSocket port.") var port: Int
    @Option(help: "The first user's number.") var first = 0
    @Option(help: "WebSocket connections to open.") var connections: Int
    @Option(help: "Sessions, spread over the connections.") var sessions: Int
    @Option(help: "Seconds of heartbeats after the go line.") var seconds: Double
    @Flag(help: "Idle phones (W5): one session per connection, kept alive by it; only pings are answered.")
    var idle = false

    func run() throws {
        do {
            if idle {
                try WebSocketClients.runIdle(port: port, first: first, connections: connections, seconds: seconds)
            } else {
                try WebSocketClients.run(
                    port: port, first: first, connections: connections, sessions: sessions, seconds: seconds)
            }
        } catch {
            throw fail(error)
        }
    }
}
