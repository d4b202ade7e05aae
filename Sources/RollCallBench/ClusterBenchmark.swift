import Foundation
import RollCallClient
import RollCallTestSupport
import RollCallWire

/// `rollcall-bench cluster` (issue #12): three `rollcall serve` nodes on a three-member etcd on loopback, beside a
/// single broker in the same run. A change made on one node is timed to a subscriber on another; a burst of changes
/// is counted to the last delivery on another node; a killed node's sessions are timed to their end everywhere.
public struct ClusterBenchmark: Sendable {
    public struct Parameters: Sendable {
        /// Changes timed one by one, at `rate` a second.
        public var latencyChanges = 2_000
        public var rate = 200
        /// The burst: changes over `users` sessions of one node, as fast as the pipeline takes them.
        public var burstChanges = 20_000
        public var users = 1_000
        /// Sessions on the node that is killed.
        public var doomedSessions = 1_000
        public var leaseMs = 2_000
        /// Whether each node has a data directory, and so keeps the presence log (docs/history.md, "On a cluster").
        public var nodesKeepLogs = false
        /// Whether every node is given a webhook URL (a receiver in this process), one of them delivering it
        /// (docs/webhooks.md, "On a cluster"); needs `nodesKeepLogs`. The burst's CPU is then counted until the
        /// receiver has every change, and C4 gives the delivered events per second.
        public var webhooks = false

        public init() {}

        /// A small, fast run that checks the benchmark works.
        public static var smoke: Parameters {
            var p = Parameters()
            p.latencyChanges = 100
            p.burstChanges = 1_000
            p.users = 100
            p.doomedSessions = 100
            return p
        }
    }

    let executable: String
    let parameters: Parameters
    let log: @Sendable (String) -> Void
    /// The receiver every node is given, while measured with webhooks.
    private var webhooks: (url: String, secretFile: String, receiver: PresenceBenchmarks.WebhookReceiver)?

    public init(executable: String, parameters: Parameters, log: @escaping @Sendable (String) -> Void) {
        self.executable = executable
        self.parameters = parameters
        self.log = log
    }

    public func run() async throws -> [BenchRow] {
        guard parameters.webhooks else { return try measure() }
        guard parameters.nodesKeepLogs else { throw BenchError("webhooks need the presence log: --logs") }
        let receiver = PresenceBenchmarks.WebhookReceiver()
        return try await receiver.serve { url in
            let secretFile = PresenceBenchmarks.temporaryDirectory() + ".secret"
            defer { try? FileManager.default.removeItem(atPath: secretFile) }
            try PresenceBenchmarks.WebhookReceiver.writeSecret(to: secretFile)
            var configured = self
            configured.webhooks = (url, secretFile, receiver)
            let bench = configured
            // On a thread of its own: it blocks for minutes, and the receiver's handlers need Swift Concurrency's.
            return try await withCheckedThrowingContinuation { continuation in
                Thread { continuation.resume(with: Result { try bench.measure() }) }.start()
            }
        }
    }

    private func measure() throws -> [BenchRow] {
        log("starting a three-member etcd")
        let etcd = try EtcdCluster(members: 3, inMemory: false)
        defer { etcd.shutdown() }
        let single = try BrokerProcess(executable: executable, arguments: [])
        defer { single.stop() }
        var nodes: [BrokerProcess] = []
        let logs = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-bench-logs-\(UUID())")
        defer {
            for node in nodes where node.isRunning { node.stop() }
            try? FileManager.default.removeItem(at: logs)
        }
        for index in 0..<3 {
            var arguments = [
                "--cluster", etcd.clusterURL, "--node-id", "n\(index)", "--node-lease-ms", "\(parameters.leaseMs)",
            ]
            if parameters.nodesKeepLogs { arguments += ["--data-dir", logs.appendingPathComponent("n\(index)").path] }
            if let webhooks {
                arguments += ["--webhook-url", webhooks.url, "--webhook-secret-file", webhooks.secretFile]
            }
            nodes.append(try BrokerProcess(executable: executable, arguments: arguments))
        }
        for node in nodes { try waitUntilLive(node) }
        log("three nodes live")

        var rows: [BenchRow] = []
        let alone = try latency(command: single.command, update: single.update)
        let across = try latency(command: nodes[0].command, update: nodes[1].update)
        rows.append(
            BenchRow(
                id: "C1.latency",
                scenario:
                    "status change → subscriber: on another node of the cluster, and on a single broker, one at a time at \(parameters.rate)/s",
                figures: across.figures(prefix: "cluster_").merging(alone.figures(prefix: "single_")) { a, _ in a },
                summary:
                    "cluster p50/p99 \(f(across.milliseconds(at: 50))) / \(f(across.milliseconds(at: 99))) ms; "
                    + "single broker \(f(alone.milliseconds(at: 50), 3)) / \(f(alone.milliseconds(at: 99), 3)) ms; "
                    + "p50 ratio \(f(across.milliseconds(at: 50) / max(0.001, alone.milliseconds(at: 50)), 1))x "
                    + "(n=\(across.count))",
                histogram: across.distribution))

        let burstAlone = try burst(
            command: single.command, update: single.update, prefix: "s", cpu: [single.pid], webhooks: nil)
        let etcdPIDs = etcd.members.compactMap(\.pid)
        let burstAcross = try burst(
            command: nodes[0].command, update: nodes[1].update, prefix: "c", cpu: nodes.map(\.pid) + etcdPIDs,
            webhooks: webhooks?.receiver)
        // CPU per 1,000 changes: the brokers' (the first pids) and etcd's (the rest).
        let perThousand = { (seconds: Double) in seconds / Double(max(1, parameters.burstChanges)) * 1_000 }
        let nodeCPU = burstAcross.cpu.prefix(nodes.count).reduce(0, +)
        let etcdCPU = burstAcross.cpu.dropFirst(nodes.count).reduce(0, +)
        rows.append(
            BenchRow(
                id: "C2.throughput",
                scenario:
                    "\(n(Double(parameters.burstChanges))) changes over \(n(Double(parameters.users))) sessions of one node, pipelined, to a subscriber of every user on another node",
                figures: [
                    "cluster_per_second": burstAcross.perSecond, "cluster_received": Double(burstAcross.received),
                    "single_per_second": burstAlone.perSecond, "single_received": Double(burstAlone.received),
                    "cluster_nodes_cpu_s_per_1000": perThousand(nodeCPU),
                    "cluster_etcd_cpu_s_per_1000": perThousand(etcdCPU),
                    "single_cpu_s_per_1000": perThousand(burstAlone.cpu.reduce(0, +)),
                ],
                summary:
                    "cluster \(n(burstAcross.perSecond))/s (\(n(Double(burstAcross.received))) of \(n(Double(parameters.burstChanges))) received); "
                    + "single broker \(n(burstAlone.perSecond))/s (\(n(Double(burstAlone.received))) received); "
                    + "CPU per 1,000 changes: the three nodes \(f(perThousand(nodeCPU) * 1_000, 0)) ms, "
                    + "etcd \(f(perThousand(etcdCPU) * 1_000, 0)) ms, single broker "
                    + "\(f(perThousand(burstAlone.cpu.reduce(0, +)) * 1_000, 0)) ms"
                    + (webhooks == nil ? "" : " (the cluster's counted until the receiver had every change)")))
        let death = try nodeDeath(nodes: nodes)
        rows.append(
            BenchRow(
                id: "C3.node-death",
                scenario:
                    "kill -9 of a node holding \(n(Double(parameters.doomedSessions))) sessions → every one offline (node_lost) on another node, lease \(parameters.leaseMs) ms",
                figures: ["first_ms": death.first, "last_ms": death.last, "ended": Double(death.ended)],
                summary:
                    "first offline after \(n(death.first)) ms, the last after \(n(death.last)) ms (\(death.ended) of \(parameters.doomedSessions))"
            ))
        if let delivered = burstAcross.webhooks {
            rows.append(
                BenchRow(
                    id: "C4.webhooks",
                    scenario:
                        "C2's changes POSTed to one webhook URL that every node is given, one node delivering it, default batching",
                    figures: ["per_second": delivered.perSecond, "events": Double(delivered.events)],
                    summary:
                        "\(n(delivered.perSecond)) events/s delivered (\(n(Double(delivered.events))) of the \(n(Double(burstAcross.received))) changes the subscriber got)"
                ))
        }
        return rows
    }

    private func waitUntilLive(_ node: BrokerProcess) throws {
        let client = try CommandClient(endpoint: node.command, timeoutMilliseconds: 500)
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if (try? client.ping())?.cluster?.state == .live { return }
            Thread.sleep(forTimeInterval: 0.02)
        }
        throw BenchError("a node did not become live within 20 s")
    }

    /// Waits until `subscriber` has `count` messages, or nothing more came for `quiet`; returns what it has.
    private func waitFor(_ subscriber: LatencySubscriber, count: Int, quiet: Duration = .seconds(5)) -> Int {
        waitForCount(count, quiet: quiet) { subscriber.messagesSoFar }
    }

    /// One change at a time, `rate` a second, timed from the send to the subscriber.
    private func latency(command: String, update: String) throws -> LatencyHistogram {
        let user = "lat\(UInt32.random(in: 0...UInt32.max))"
        let pipeline = try RequestPipeline(endpoint: command)
        let session = try pipeline.openSessions(users: [user])[0]
        let subscriber = try LatencySubscriber(endpoint: update, topics: ["presence/\(user)/"])
        // The last value on subscribing says the subscription is in place.
        guard waitFor(subscriber, count: 1) >= 1 else { throw BenchError("the subscription did not take") }
        let interval = Duration.seconds(1) / parameters.rate
        var due = ContinuousClock.now
        for _ in 0..<parameters.latencyChanges {
            due += interval
            try pipeline.send(PresenceBenchmarks.timedChange(session))
            pace(until: due)
        }
        try pipeline.drain()
        _ = waitFor(subscriber, count: parameters.latencyChanges + 1)
        return subscriber.stop().latency
    }

    /// Changes as fast as the pipeline takes them, counted to the last delivery.
    /// `cpu`: processes whose CPU time over the burst is returned, in order; with `webhooks`, counted until that
    /// receiver has every change too.
    private func burst(
        command: String, update: String, prefix: String, cpu pids: [Int32],
        webhooks receiver: PresenceBenchmarks.WebhookReceiver?
    ) throws -> (perSecond: Double, received: Int, cpu: [Double], webhooks: (events: Int, perSecond: Double)?) {
        let users = (0..<parameters.users).map { "\(prefix)burst\($0)" }
        let pipeline = try RequestPipeline(endpoint: command)
        let sessions = try pipeline.openSessions(users: users)
        let subscriber = try LatencySubscriber(endpoint: update, topics: ["presence/\(prefix)burst"])
        // Every user's hello arrives first (the cluster publishes it once it came back from etcd), and every webhook
        // event so far (a second without one).
        let opened = waitFor(subscriber, count: users.count)
        let eventsBefore = receiver.map { $0.waitForEvents(.max, quiet: .seconds(1)) } ?? 0
        let cpuBefore = pids.map(ProcessStats.cpuSeconds(pid:))
        let start = monotonicNanoseconds()
        for index in 0..<parameters.burstChanges {
            try pipeline.send(PresenceBenchmarks.timedChange(sessions[index % sessions.count]))
        }
        try pipeline.drain()
        let total = waitFor(subscriber, count: opened + parameters.burstChanges)
        let received = total - opened
        // The log keeps one entry for a user changed twice in one revision: as many events as the subscriber got.
        let delivered = receiver.map { $0.waitForEvents(eventsBefore + received, quiet: .seconds(10)) - eventsBefore }
        let cpu = zip(pids.map(ProcessStats.cpuSeconds(pid:)), cpuBefore).map { $0 - $1 }
        let measured = subscriber.stop()
        let rate = perSecond(received, from: start, to: measured.lastArrival)
        log("burst \(prefix): \(received) of \(parameters.burstChanges) at \(n(rate))/s")
        var webhooks: (events: Int, perSecond: Double)?
        if let receiver, let delivered {
            webhooks = (delivered, perSecond(delivered, from: start, to: receiver.snapshot.lastArrival))
        }
        return (rate, received, cpu, webhooks)
    }

    /// Kills the third node with its sessions and times their end on the first.
    private func nodeDeath(nodes: [BrokerProcess]) throws -> (first: Double, last: Double, ended: Int) {
        let users = (0..<parameters.doomedSessions).map { "doomed\($0)" }
        let subscriber = try LatencySubscriber(endpoint: nodes[0].update, topics: ["presence/doomed"])
        Thread.sleep(forTimeInterval: 0.3)  // no last value to wait for: these users are new
        let pipeline = try RequestPipeline(endpoint: nodes[2].command)
        _ = try pipeline.openSessions(users: users)
        let online = waitFor(subscriber, count: users.count)
        guard online >= users.count else { throw BenchError("only \(online) of \(users.count) sessions seen") }
        let killed = monotonicNanoseconds()
        nodes[2].kill()
        var first: UInt64?
        var last = online
        while subscriber.messagesSoFar < online + users.count {
            Thread.sleep(forTimeInterval: 0.001)
            if first == nil, subscriber.messagesSoFar > last { first = monotonicNanoseconds() }
            last = subscriber.messagesSoFar
            if Double(monotonicNanoseconds() - killed) / 1e6 > Double(parameters.leaseMs) + 10_000 { break }
        }
        let measured = subscriber.stop()
        let ended = measured.messages - online
        let toMs = { (t: UInt64) in Double(t - killed) / 1e6 }
        return (toMs(first ?? killed), toMs(measured.lastArrival), ended)
    }
}
