import Foundation
import RollCallCore
import RollCallTestSupport
import RollCallWire
import Synchronization
import ZeroMQ

/// The presence scenarios of `rollcall bench`, each against a fresh `rollcall serve` child process.
public struct PresenceBenchmarks {
    public let executable: String
    public let log: @Sendable (String) -> Void
    /// Added to every broker's `serve` arguments, such as `--http-endpoint 127.0.0.1:0` to measure with the
    /// Prometheus metrics backend on.
    public var brokerArguments: [String] = []
    /// When set, every broker runs CURVE and every client of the scenarios uses these keys.
    public var curve: CurveSetup?

    public init(executable: String, log: @escaping @Sendable (String) -> Void) {
        self.executable = executable
        self.log = log
    }

    /// A `rollcall serve` child process with the scenario's arguments and ``brokerArguments``.
    func broker(_ arguments: [String], startTimeout: Double = 10) throws -> BrokerProcess {
        try BrokerProcess(
            executable: executable, arguments: arguments + brokerArguments + (curve?.brokerArguments ?? []),
            startTimeout: startTimeout)
    }

    /// Opens `count` sessions (TTL one hour unless given) and returns their ids, pipelined over one connection.
    func openSessions(_ pipeline: RequestPipeline, users: [String], ttl: Int = 3_600_000) throws -> [String] {
        try pipeline.openSessions(users: users, ttl: ttl)
    }

    /// A status change that carries a time (by default now), so that a subscriber can time it.
    static func timedChange(_ session: String, stamp: UInt64 = monotonicNanoseconds()) -> [UInt8] {
        Array(#"{"op":"status","session":"\#(session)","status":"online","text":"b\#(stamp)"}"#.utf8)
    }

    /// Waits until the subscribers have received nothing more for 300 ms.
    static func settle(_ subscribers: [LatencySubscriber]) {
        var last = -1
        while subscribers.map(\.messagesSoFar).reduce(0, +) != last {
            last = subscribers.map(\.messagesSoFar).reduce(0, +)
            Thread.sleep(forTimeInterval: 0.3)
        }
    }

    // MARK: 1. Propagation latency

    /// A status change from a client to a subscriber of every user, at `rate` changes a second.
    public func latency(rate: Int, seconds: Double) throws -> BenchRow {
        let broker = try broker(["--update-hwm", "100000"])
        defer { broker.stop() }
        let pipeline = try RequestPipeline(endpoint: broker.command, credentials: curve?.credentials)
        let sessions = try openSessions(pipeline, users: (0..<100).map { "lat\($0)" })
        let subscriber = try LatencySubscriber(
            endpoint: broker.update, topics: ["presence/"], credentials: curve?.credentials)
        Thread.sleep(forTimeInterval: 0.3)
        log("latency: \(rate)/s for \(seconds) s")
        let total = Int(Double(rate) * seconds)
        let cpu = broker.cpuSeconds()
        let start = ContinuousClock.now
        for index in 0..<total {
            pace(until: start + .nanoseconds(Int64(Double(index) * 1e9 / Double(rate))))
            // Stamped as it goes, as the peers' zlat does. The sender never waits for the broker (the window is
            // far from full at these rates), so no delay of the broker's hides in a late send.
            try pipeline.send(Self.timedChange(sessions[index % sessions.count]))
        }
        try pipeline.drain()
        let wall = (ContinuousClock.now - start).seconds
        let used = broker.cpuSeconds() - cpu
        Self.settle([subscriber])
        let measured = subscriber.stop()
        let lost = total - measured.entries
        var figures = measured.latency.figures()
        figures["per_second"] = Double(total) / wall
        figures["lost"] = Double(lost)
        figures["broker_cpu_percent"] = used / wall * 100
        return BenchRow(
            id: "R1.latency-\(rate)",
            scenario: "status change → subscriber of presence/, Swift clients, \(n(Double(rate)))/s",
            figures: figures,
            summary:
                "\(measured.latency.summary), achieved \(n(Double(total) / wall))/s, lost \(lost), broker CPU \(f(used / wall * 100, 0)) %",
            histogram: measured.latency.distribution)
    }

    // MARK: 2. Peak throughput

    /// The most status changes a second the broker takes and publishes to `subscribers` all-users subscribers,
    /// with none lost: unpaced first, then paced below what was delivered until a run loses nothing.
    public func throughput(subscribers count: Int, seconds: Double) throws -> BenchRow {
        let broker = try broker(["--update-hwm", "1000000"])
        defer { broker.stop() }
        // The window stays under half the ROUTER's 1,000 queued replies per peer (RequestPipeline.safeWindow).
        let pipeline = try RequestPipeline(endpoint: broker.command, credentials: curve?.credentials)
        let sessions = try openSessions(pipeline, users: (0..<1_000).map { "tp\($0)" })
        var rate: Double? = nil  // unpaced first
        var attempts: [String] = []
        for attempt in 0..<5 {
            let subscribers = try (0..<count).map { _ in
                try LatencySubscriber(endpoint: broker.update, topics: ["presence/"], credentials: curve?.credentials)
            }
            Thread.sleep(forTimeInterval: 0.3)
            let cpu = broker.cpuSeconds()
            let start = ContinuousClock.now
            var sent = 0
            while (ContinuousClock.now - start).seconds < seconds {
                if let rate { pace(until: start + .nanoseconds(Int64(Double(sent) * 1e9 / rate))) }
                try pipeline.send(Self.timedChange(sessions[sent % sessions.count]))
                sent += 1
            }
            let startStamp = monotonicNanoseconds() - UInt64((ContinuousClock.now - start).seconds * 1e9)
            try pipeline.drain()
            let used = broker.cpuSeconds() - cpu
            Self.settle(subscribers)  // what is still buffered on its way counts only when it arrives
            let measured = subscribers.map { $0.stop() }
            let worst = measured.map(\.entries).min() ?? 0
            // Timed to the slowest subscriber's last arrival, not to the last reply: delivered, not just sent.
            let wall = Double((measured.map(\.lastArrival).max() ?? startStamp) - startStamp) / 1e9
            let lossPercent = Double(sent - worst) / Double(sent) * 100
            attempts.append(
                "\(rate.map { "paced \(n($0))/s" } ?? "unpaced"): sent \(n(Double(sent) / wall))/s, loss \(f(lossPercent, 2)) %"
            )
            log("throughput, \(count) subscriber(s): \(attempts.last!)")
            if worst == sent || attempt == 4 {
                let perSecond = Double(worst) / wall
                return BenchRow(
                    id: "R2.throughput-\(count)sub",
                    scenario:
                        "lossless status changes/s to \(count) all-users subscriber(s) (XPUB and SUB HWM 1,000,000)",
                    figures: [
                        "per_second": perSecond, "loss_percent": lossPercent, "broker_cpu_percent": used / wall * 100,
                        "lossless": worst == sent ? 1 : 0,
                    ],
                    summary:
                        "**\(n(perSecond))/s** delivered to each subscriber\(worst == sent ? "" : " (NOT lossless)"), "
                        + "broker CPU \(f(used / wall * 100, 0)) %; runs: \(attempts.joined(separator: "; "))")
            }
            rate = Double(worst) / wall * 0.85
        }
        throw BenchError("unreachable")
    }

    // MARK: 3. Sessions at rest

    /// `count` sessions over four connections, each heartbeating every second: broker CPU and memory per session.
    public func sessions(count: Int, seconds: Double) throws -> BenchRow {
        let broker = try broker(["--max-sessions-per-user", "1"])
        defer { broker.stop() }
        Thread.sleep(forTimeInterval: 0.5)
        let idle = broker.residentBytes()
        let pipelines = try (0..<4).map { _ in
            try RequestPipeline(endpoint: broker.command, credentials: curve?.credentials)
        }
        var bodies: [[UInt8]] = []
        for (index, pipeline) in pipelines.enumerated() {
            let users = stride(from: index, to: count, by: pipelines.count).map { "s\($0)" }
            for session in try openSessions(pipeline, users: users, ttl: 3_000) {
                bodies.append(Array(#"{"op":"heartbeat","session":"\#(session)"}"#.utf8))
            }
        }
        log("sessions: \(count) open, heartbeating for \(seconds) s")
        let cpu = broker.cpuSeconds()
        let start = ContinuousClock.now
        let total = Int(Double(count) * seconds)
        for index in 0..<total {
            pace(until: start + .nanoseconds(Int64(Double(index) * 1e9 / Double(count))))
            try pipelines[index % pipelines.count].send(bodies[index % bodies.count])
        }
        for pipeline in pipelines { try pipeline.drain() }
        let wall = (ContinuousClock.now - start).seconds
        let used = broker.cpuSeconds() - cpu
        let resident = broker.residentBytes()
        let failures = pipelines.map(\.failures).reduce(0, +)
        let perSession = Double(resident - idle) / Double(count)
        return BenchRow(
            id: "R3.sessions-\(count / 1_000)k",
            scenario: "\(n(Double(count))) sessions over 4 connections, each heartbeating every second",
            figures: [
                "broker_cpu_percent": used / wall * 100, "rss_bytes": Double(resident),
                "bytes_per_session": perSession, "heartbeats_per_second": Double(total) / wall,
                "failures": Double(failures),
            ],
            summary:
                "broker CPU **\(f(used / wall * 100, 1)) %** of a core at \(n(Double(total) / wall)) heartbeats/s; "
                + "RSS \(f(Double(resident) / 1_048_576, 1)) MB, **\(n(perSession)) bytes/session** over idle "
                + "\(f(Double(idle) / 1_048_576, 1)) MB; \(failures) failed")
    }

    // MARK: 4. Fan-out

    /// One user's change delivered to `subscribers` subscribers of that user's topic.
    public func fanout(subscribers count: Int, changes: Int) throws -> BenchRow {
        let broker = try broker([])
        defer { broker.stop() }
        let pipeline = try RequestPipeline(endpoint: broker.command, credentials: curve?.credentials)
        let session = try openSessions(pipeline, users: ["fan"])[0]
        let context = try Context()
        let sockets = try (0..<count).map { _ in
            let socket = try Socket(context, .sub)
            try socket.set(.linger(milliseconds: 0))
            try socket.set(.subscribe(Array("presence/fan/".utf8)))
            try socket.connect(broker.update)
            return socket
        }
        // Each subscription is live once its last value arrived.
        try FanOut.awaitLastValues(sockets)
        log("fan-out: \(changes) changes to \(count) subscribers")
        let (perDelivery, toAll, missed) = try FanOut.time(
            sockets, pipeline: pipeline, session: session, changes: changes
        )
        .results
        var figures = perDelivery.figures()
        figures.merge(toAll.figures(prefix: "all_"), uniquingKeysWith: { $1 })
        figures["missed"] = Double(missed)
        return BenchRow(
            id: "R4.fanout-\(count)",
            scenario: "one change → \(n(Double(count))) subscribers of the same user (\(changes) changes)",
            figures: figures,
            summary:
                "per delivery \(perDelivery.summary); to the last subscriber p50 **\(f(toAll.milliseconds(at: 50), 2)) ms**, "
                + "max \(f(toAll.maxMilliseconds, 2)) ms; \(missed) missed",
            histogram: perDelivery.distribution)
    }

    // MARK: 5. Crash detection

    /// A client's connection closes (as when its process is killed): time until its offline record arrives.
    public func crash(trials: Int) throws -> BenchRow {
        let broker = try broker([])
        defer { broker.stop() }
        let context = try Context()
        let subscriber = try Socket(context, .sub)
        try subscriber.set(.subscribe(Array("presence/".utf8)))
        try subscriber.connect(broker.update)
        Thread.sleep(forTimeInterval: 0.3)
        var poller = Poller([subscriber])
        var histogram = LatencyHistogram()
        log("crash: \(trials) trials")
        for trial in 0..<trials {
            let client = try Socket(context, .dealer)
            try client.set(.linger(milliseconds: 0))
            try client.connect(broker.command)
            try client.send(#"{"op":"hello","user":"crash\#(trial)"}"#, wait: true)
            _ = try client.receiveMessage(wait: true)
            Thread.sleep(forTimeInterval: 0.005)
            while try subscriber.receiveMessage() != nil {}
            client.close()  // the connection closes: FIN, as when the process dies
            let closed = monotonicNanoseconds()
            let marker = Array(#""user":"crash\#(trial)","status":"offline""#.utf8)
            var found = false
            while !found, try poller.poll(timeout: 2_000)[0] {
                while let (frames, _) = try subscriber.receiveMessage() {
                    if frames.count == 2 && contains(frames[1].bytes, marker) { found = true }
                }
            }
            guard found else { throw BenchError("trial \(trial): no offline record within 2 s") }
            histogram.record(microseconds: (monotonicNanoseconds() - closed) / 1_000)
        }
        return BenchRow(
            id: "R5.crash", scenario: "connection closed → offline record at a subscriber, no grace, \(trials) trials",
            figures: histogram.figures(), summary: histogram.summary, histogram: histogram.distribution)
    }

    // MARK: 6. TTL expiry at scale

    /// With `live` sessions in the broker, `probes` sessions go silent: how late past its TTL each is published.
    public func expiry(live: Int, probes: Int, ttl: Int) throws -> BenchRow {
        let broker = try broker(["--min-ttl-ms", "100"])
        defer { broker.stop() }
        let pipeline = try RequestPipeline(endpoint: broker.command, credentials: curve?.credentials)
        log("expiry: \(live) live sessions")
        _ = try openSessions(pipeline, users: (0..<live).map { "live\($0)" })
        let subscriber = try LatencyExpiryWatcher(endpoint: broker.update, prefix: "presence/probe")
        Thread.sleep(forTimeInterval: 0.3)
        log("expiry: \(probes) probes with ttl \(ttl) ms")
        var said: [UInt64] = []
        let start = ContinuousClock.now
        for index in 0..<probes {
            pace(until: start + .milliseconds(index * 1_000 / max(1, probes / 2)))
            let sent = monotonicNanoseconds()
            try pipeline.send(Array(#"{"op":"hello","user":"probe\#(index)","ttl_ms":\#(ttl)}"#.utf8))
            try pipeline.drain()
            said.append(sent)
        }
        let offline = try subscriber.wait(for: probes, seconds: Double(ttl) / 1_000 + 5)
        var histogram = LatencyHistogram()
        for (index, sent) in said.enumerated() {
            guard let at = offline["probe\(index)"] else { continue }
            let due = sent + UInt64(ttl) * 1_000_000
            histogram.record(microseconds: at > due ? (at - due) / 1_000 : 0)
        }
        return BenchRow(
            id: "R6.expiry",
            scenario: "silent session → offline past its TTL (\(ttl) ms), with \(n(Double(live))) live sessions",
            figures: histogram.figures().merging(["missed": Double(probes - offline.count)], uniquingKeysWith: { $1 }),
            summary: "late by \(histogram.summary); \(probes - offline.count) of \(probes) missed",
            histogram: histogram.distribution)
    }
}

/// Whether `bytes` contains `needle`.
func contains(_ bytes: [UInt8], _ needle: [UInt8]) -> Bool {
    guard needle.count <= bytes.count else { return false }
    for start in 0...(bytes.count - needle.count) where bytes[start] == needle[0] {
        if bytes[start..<start + needle.count].elementsEqual(needle) { return true }
    }
    return false
}

/// Watches, from its own thread, the offline records of users whose topic starts with `prefix`, and notes when
/// each arrived.
final class LatencyExpiryWatcher: Sendable {
    private let offline = Mutex<[String: UInt64]>([:])
    private let stopping = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)

    init(endpoint: String, prefix: String) throws {
        let context = try Context()
        let socket = try Socket(context, .sub)
        try socket.set(.receiveHighWaterMark(1_000_000))
        try socket.set(.linger(milliseconds: 0))
        try socket.set(.subscribe(Array(prefix.utf8)))
        try socket.connect(endpoint)
        let handOff = HandOff((context, socket))
        Thread { [self] in
            let (context, socket) = handOff.take()
            withExtendedLifetime(context) { run(socket) }
        }.start()
    }

    private func run(_ socket: Socket) {
        defer { done.signal() }
        var poller = Poller([socket])
        let marker = Array(#""status":"offline""#.utf8)
        while !stopping.load(ordering: .relaxed) {
            guard (try? poller.poll(timeout: 50))?.first == true else { continue }
            while let (frames, _) = try? socket.receiveMessage(), frames.count == 2 {
                let now = monotonicNanoseconds()
                guard contains(frames[1].bytes, marker) else { continue }
                guard case .presence(let id)? = ReceivedTopic(frames[0].bytes)?.topic else { continue }
                let user = id.rawValue
                offline.withLock { if $0[user] == nil { $0[user] = now } }
            }
        }
    }

    /// Waits until `count` users went offline or `seconds` passed; returns when each did (CLOCK_MONOTONIC ns).
    func wait(for count: Int, seconds: Double) throws -> [String: UInt64] {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
        while offline.withLock({ $0.count }) < count, ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.01)
        }
        stopping.store(true, ordering: .relaxed)
        done.wait()
        return offline.withLock { $0 }
    }
}

extension RequestPipeline {
    /// Opens one session per user (TTL one hour unless given), pipelined, and returns their ids in order.
    func openSessions(users: [String], ttl: Int = 3_600_000) throws -> [String] {
        collected = []
        for user in users { try send(Array(#"{"op":"hello","user":"\#(user)","ttl_ms":\#(ttl)}"#.utf8)) }
        try drain()
        defer { collected = nil }
        return try collected!.map { body in
            guard let session = try Codec.decodeReply(body).result.get()["session"]?.string else {
                throw BenchError("hello failed: \(String(decoding: body, as: UTF8.self))")
            }
            return session
        }
    }
}
