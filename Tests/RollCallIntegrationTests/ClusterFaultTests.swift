import Foundation
import RollCallClient
import RollCallCore
import RollCallTestSupport
import RollCallWire
import Testing

/// Three `rollcall serve` nodes on a three-member etcd, each node reaching every member through its own TCP relay
/// (so that a test can cut a node off from etcd), with nodes killed and started again under the same node id.
final class FaultCluster: @unchecked Sendable {
    let etcd: EtcdCluster
    let leaseMs: Int
    /// `relays[node][member]`: node `node`'s path to etcd member `member`.
    let relays: [[TCPRelay]]
    private let lock = NSLock()
    private var processes: [BrokerProcess]
    private var generations = [0, 0, 0]

    init(leaseMs: Int) throws {
        let etcd = try EtcdCluster(members: 3)
        self.etcd = etcd
        self.leaseMs = leaseMs
        relays = try (0..<3).map { _ in try etcd.members.map { try TCPRelay(to: $0.clientPort) } }
        processes = []
        do {
            for node in 0..<3 { processes.append(try start(node)) }
            for node in 0..<3 { try waitUntilLive(node) }
        } catch {
            shutdown()
            throw error
        }
    }

    deinit { shutdown() }

    func shutdown() {
        let running = lock.withLock { processes }
        for process in running { process.stop() }
        etcd.shutdown()
    }

    private func start(_ node: Int) throws -> BrokerProcess {
        let url = "etcd://" + relays[node].map { "127.0.0.1:\($0.port)" }.joined(separator: ",")
        return try BrokerProcess(
            executable: ChildProcess.rollcall,
            arguments: [
                "--cluster", url, "--node-id", FaultSchedule.nodeNames[node], "--node-lease-ms", "\(leaseMs)",
            ])
    }

    /// Node `node`'s endpoints and the run of its process they belong to (those of a killed process until it is
    /// started again: clients find it dead as a real client would).
    func endpoints(_ node: Int) -> (command: String, update: String, generation: Int) {
        lock.withLock { (processes[node].command, processes[node].update, generations[node]) }
    }

    /// Kills node `node` with SIGKILL; returns the run that was killed.
    func kill(_ node: Int) -> Int {
        let (process, generation) = lock.withLock { (processes[node], generations[node]) }
        process.kill()
        return generation
    }

    /// Starts node `node` again under the same node id (a new process on new ports, a new incarnation).
    func restart(_ node: Int) throws {
        let process = try start(node)
        lock.withLock {
            processes[node] = process
            generations[node] += 1
        }
    }

    func cut(_ node: Int) { relays[node].forEach { $0.cut() } }
    func restore(_ node: Int) { relays[node].forEach { $0.restore() } }

    /// Waits until node `node` says, in `ping`, that it is live.
    func waitUntilLive(_ node: Int, timeout: Duration = .seconds(15)) throws {
        let client = try CommandClient(endpoint: endpoints(node).command, timeoutMilliseconds: 500)
        let deadline = ContinuousClock.now + timeout
        var last: ClusterStanding?
        while ContinuousClock.now < deadline {
            last = (try? client.ping())?.cluster
            if last?.state == .live { return }
            pause(milliseconds: 20)
        }
        throw TestFailure("node \(node) not live within \(timeout); last: \(String(describing: last))")
    }
}

/// What a cluster fault run records as it goes, from the clients' threads, the subscribers' thread and the
/// fault thread.
final class FaultRecorder: @unchecked Sendable {
    let start = ContinuousClock.now
    private let lock = NSLock()
    private var recording: FaultRecording
    private var clientsRun = true
    private var subscribersRun = true
    private(set) var log: [String] = []

    init(leaseMs: Int, ttlMs: Int) { recording = FaultRecording(leaseMs: leaseMs, ttlMs: ttlMs) }

    /// Milliseconds since the run began.
    var nowMs: Int {
        let elapsed = ContinuousClock.now - start
        return Int(elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
    }

    /// Whether the clients go on changing statuses.
    var clientsRunning: Bool { lock.withLock { clientsRun } }
    func stopClients() { lock.withLock { clientsRun = false } }
    /// Whether the subscribers go on reading.
    var subscribersRunning: Bool { lock.withLock { subscribersRun } }
    func stopSubscribers() { lock.withLock { subscribersRun = false } }
    var snapshot: FaultRecording { lock.withLock { recording } }

    func add(_ request: FaultRecording.Request) { lock.withLock { recording.requests.append(request) } }
    func add(_ arrival: FaultRecording.Arrival) { lock.withLock { recording.arrivals.append(arrival) } }
    func add(_ kill: FaultRecording.Kill) { lock.withLock { recording.kills.append(kill) } }

    /// Notes what the fault thread did, with the time.
    func note(_ line: String) {
        let at = String(format: "t=%6.2f s", Double(nowMs) / 1_000)
        lock.withLock { log.append("\(at): \(line)") }
    }
}

/// One user's client: a session on one node at a time, a change of status and text every few hundred ms, and a
/// move to another node when its node is refused (`cluster_unavailable`: a `bye` first, which a cut-off node
/// still takes), gone (no reply) or has forgotten the session (`unknown_session`).
struct FaultClient {
    static let ttlMs = 4_000
    static let timeoutMs = 600

    let user: UserID
    let cluster: FaultCluster
    let recorder: FaultRecorder
    var random: SplitMix64
    var number = 0
    var node: Int
    var current: (generation: Int, client: CommandClient, session: SessionID)?
    /// Whether the last hello or status was answered `ok`.
    var acknowledged = false

    /// The session the client holds at the end, for the final change.
    var held: (node: Int, generation: Int, session: SessionID)? {
        current.map { (node, $0.generation, $0.session) }
    }

    init(user: UserID, index: Int, seed: UInt64, cluster: FaultCluster, recorder: FaultRecorder) {
        self.user = user
        self.cluster = cluster
        self.recorder = recorder
        random = SplitMix64(seed: seed &+ UInt64(index + 1) &* 0x9E37_79B9_7F4A_7C15)
        node = index % 3
    }

    /// Changes status until the recorder stops; the pace is the workload, not a decision.
    mutating func run() {
        while recorder.clientsRunning {
            pause(milliseconds: Int.random(in: 150...450, using: &random))
            let status = [Status.online, .busy, .away].randomElement(using: &random)!
            step(status)
        }
    }

    /// One change: a status on the session held, or a hello on the node chosen.
    mutating func step(_ status: Status) {
        number += 1
        let text = "n\(number)"
        if let held = current {
            let outcome = call(held.client) { try $0.setStatus(held.session, status, text: text) }
            record(.status, held.generation, held.session, status, text, outcome)
            acknowledged = outcome.1 == .ok
            guard outcome.1 != .ok else { return }
            if outcome.1 == .rejected(.clusterUnavailable) {
                let bye = call(held.client) { try $0.bye(held.session) }
                record(.bye, held.generation, held.session, status, nil, bye)
            }
            current = nil
            node = (node + 1) % 3
            return
        }
        let (command, _, generation) = cluster.endpoints(node)
        guard let client = try? CommandClient(endpoint: command, timeoutMilliseconds: Self.timeoutMs) else {
            acknowledged = false
            return
        }
        var granted: SessionID?
        let outcome = call(client) {
            granted =
                try $0.hello(
                    PresenceCore.Hello(
                        user: user, device: "fault", status: status, text: text,
                        ttlMilliseconds: Int64(Self.ttlMs))
                ).session
        }
        record(.hello, generation, granted, status, text, outcome)
        acknowledged = outcome.1 == .ok
        if let granted, outcome.1 == .ok {
            current = (generation, client, granted)
        } else {
            node = (node + 1) % 3
        }
    }

    /// Makes a call; returns when it was sent and how it ended.
    func call(_ client: CommandClient, _ body: (CommandClient) throws -> Void) -> (
        Int, FaultRecording.Request.Outcome
    ) {
        let sent = recorder.nowMs
        do {
            try body(client)
            return (sent, .ok)
        } catch ClientError.rejected(let error) {
            return (sent, .rejected(error.code))
        } catch ClientError.timedOut {
            return (sent, .timedOut)
        } catch {
            return (sent, .failed("\(error)"))
        }
    }

    func record(
        _ kind: FaultRecording.Request.Kind, _ generation: Int, _ session: SessionID?, _ status: Status,
        _ text: String?, _ outcome: (Int, FaultRecording.Request.Outcome)
    ) {
        recorder.add(
            FaultRecording.Request(
                user: user, node: node, generation: generation, kind: kind, session: session, status: status,
                text: text, sentMs: outcome.0, repliedMs: recorder.nowMs, outcome: outcome.1))
    }
}

extension FaultClient {
    /// One last change, `online`, made on the session held (or a new one) and acknowledged; returns its text.
    mutating func finalChange() -> String? {
        for _ in 0..<6 {
            step(.online)
            if current != nil && acknowledged { return "n\(number)" }
        }
        return nil
    }
}

/// The clients, handed from their threads to the test's when they stop.
final class FaultClients: @unchecked Sendable {
    private let lock = NSLock()
    private var clients: [Int: FaultClient] = [:]
    func set(_ index: Int, _ client: FaultClient) { lock.withLock { clients[index] = client } }
    func take(_ index: Int) -> FaultClient? { lock.withLock { clients.removeValue(forKey: index) } }
}

extension Integration {
    /// Issue #21 item 4: a seeded, randomized fault run over three nodes and three etcd members that no one can
    /// tune to. `ROLLCALL_FAULT_SEED` replays a run; `ROLLCALL_FAULT_SECONDS` (30 by default) makes it longer.
    ///
    /// Scoping, each following what the docs promise and no more:
    /// - `seq` 0 records (a user the node does not know) are left out of the `seq` checks: a node that loaded a
    ///   snapshot does not know users who went offline before it joined (docs/cluster.md, known weakness 10).
    /// - A restarted node's records of older state may carry a greater `seq` than the other nodes' (weakness 10):
    ///   allowed, since `seq` still only grows; two different records under one `seq` are not.
    /// - `since` and `last_seen` of `node_lost` ends are not compared across nodes: a node that got no stamp from
    ///   etcd within 1 s publishes its own time (protocol §17.5, 2; docs/cluster.md weakness 7).
    /// - Before each user's next change, converged nodes are compared on what a user sees (status, text, sessions),
    ///   after it on whole records (weakness 10 again).
    /// - An acknowledged change whose node was killed after it was sent may be lost with the node ("Every fate of
    ///   an acknowledged change", 4).
    @Suite("Cluster fault run", .serialized)
    struct ClusterFaultTests {
        static let leaseMs = 2_000
        static let users = (0..<6).map { UserID(validating: "fault\($0)")! }

        /// Kills and restarts nodes, stops and resumes etcd members (the leader included) and cuts nodes off from
        /// etcd, on a schedule drawn from a seed, while six users change statuses and fail over; then checks what
        /// every subscriber got and every client was told, and that the nodes converge once the faults heal.
        @Test func seededFaultRunKeepsTheClusterHonest() throws {
            let schedule = FaultSchedule(
                seed: FaultSchedule.seedFromEnvironment(), durationMs: FaultSchedule.durationFromEnvironment(),
                leaseMs: Self.leaseMs)
            print("cluster fault run: \(schedule)")
            let cluster = try FaultCluster(leaseMs: Self.leaseMs)
            defer { cluster.shutdown() }
            let recorder = FaultRecorder(leaseMs: Self.leaseMs, ttlMs: FaultClient.ttlMs)
            let subscribers = DispatchGroup()
            subscribers.enter()
            Thread {
                Self.subscribe(cluster, recorder)
                subscribers.leave()
            }.start()
            let clientThreads = DispatchGroup()
            let clients = FaultClients()
            for (index, user) in Self.users.enumerated() {
                clientThreads.enter()
                Thread {
                    var client = FaultClient(
                        user: user, index: index, seed: schedule.seed, cluster: cluster, recorder: recorder)
                    client.run()
                    clients.set(index, client)
                    clientThreads.leave()
                }.start()
            }

            var failures: [String] = []
            do {
                try Self.inject(schedule, cluster, recorder)
            } catch {
                failures.append("the faults could not be carried out: \(error)")
            }
            let healed = recorder.nowMs
            recorder.stopClients()
            clientThreads.wait()
            print("cluster fault run: what was done:\n  \(recorder.log.joined(separator: "\n  "))")
            do {
                failures += try Self.converge(cluster, recorder, clients, healedMs: healed)
            } catch {
                failures.append("convergence could not be checked: \(error)")
            }
            recorder.stopSubscribers()
            subscribers.wait()

            let recording = recorder.snapshot
            if let path = ProcessInfo.processInfo.environment["ROLLCALL_FAULT_DUMP"] {
                try recording.dump(schedule: schedule, log: recorder.log).write(
                    toFile: path, atomically: true, encoding: .utf8)
            }
            let outcomes = Dictionary(grouping: recording.requests) { "\($0.kind) \($0.outcome)" }.mapValues(\.count)
            print(
                "cluster fault run: \(recording.requests.count) requests \(outcomes.sorted { $0.key < $1.key }), "
                    + "\(recording.arrivals.count) records received, \(recording.kills.count) kills")
            func check(_ invariant: String, _ violations: [String]) {
                print("cluster fault run: \(invariant): \(violations.count) violation(s)")
                #expect(
                    violations.isEmpty,
                    """
                    \(invariant): \(violations.count) violation(s)
                    \(violations.prefix(20).joined(separator: "\n"))
                    \(schedule)
                    """)
            }
            check("seq only grows per user and node", FaultChecker.seqOnlyGrows(recording))
            // A known bug, not a documented weakness (see `aRejoinedNodesSnapshotReusesTheNextSeq`): a node that
            // reads a snapshot after joining again (a lease lost to a partition or a stalled etcd member) publishes
            // a user's second change in that snapshot at seq base + R + 1 (PresenceCore's `max(seq + 1, stamp)`),
            // the seq the other nodes give to the next revision, another record.
            withKnownIssue(
                "a node that loads a snapshot gives a user's second change in it the next revision's seq",
                isIntermittent: true
            ) {
                check("one seq names one record on all nodes", FaultChecker.oneSeqOneRecord(recording))
            }
            check("acknowledged changes visible or superseded", FaultChecker.acknowledgedChangesSurvive(recording))
            check(
                "no session a lease + 1 s after its node died",
                FaultChecker.deadNodesSessionsEnd(recording, slackMs: 300))
            check("the run itself", failures)
        }

        /// Carries out the schedule, each fault at its time (or at once when the one before ran late), healing it
        /// and waiting until every node is live before the next.
        static func inject(_ schedule: FaultSchedule, _ cluster: FaultCluster, _ recorder: FaultRecorder) throws {
            func wait(until ms: Int) {
                let left = ms - recorder.nowMs
                if left > 0 { pause(milliseconds: left) }
            }
            for fault in schedule.faults {
                wait(until: fault.atMs)
                switch fault.kind {
                case .killNode(let node, let down):
                    let generation = cluster.kill(node)
                    recorder.add(FaultRecording.Kill(node: node, generation: generation, atMs: recorder.nowMs))
                    recorder.note("killed node \(FaultSchedule.nodeNames[node]) (run \(generation))")
                    wait(until: fault.atMs + down)
                    try cluster.restart(node)
                    recorder.note("node \(FaultSchedule.nodeNames[node]) started again")
                case .pauseEtcd(let target, let length):
                    let member: Int
                    switch target {
                    case .leader: member = cluster.etcd.leader() ?? 0
                    case .member(let index): member = index
                    }
                    cluster.etcd.pause(member)
                    recorder.note("stopped etcd member m\(member) (\(target))")
                    wait(until: fault.atMs + length)
                    cluster.etcd.resume(member)
                    recorder.note("resumed etcd member m\(member)")
                case .partitionNode(let node, let length):
                    cluster.cut(node)
                    recorder.note("cut node \(FaultSchedule.nodeNames[node]) off from etcd")
                    wait(until: fault.atMs + length)
                    cluster.restore(node)
                    recorder.note("node \(FaultSchedule.nodeNames[node]) reaches etcd again")
                }
                try cluster.etcd.waitUntilHealthy(timeout: .seconds(15))
                for node in 0..<3 { try cluster.waitUntilLive(node) }
                recorder.note("every node live")
            }
            wait(until: schedule.durationMs)
        }

        /// Reads every user's records on every node, on a subscriber made again whenever the node is started again,
        /// until the recorder stops the subscribers.
        static func subscribe(_ cluster: FaultCluster, _ recorder: FaultRecorder) {
            var subscribers: [(generation: Int, subscriber: PresenceSubscriber)?] = [nil, nil, nil]
            while recorder.subscribersRunning {
                for node in 0..<3 {
                    let (_, update, generation) = cluster.endpoints(node)
                    if subscribers[node]?.generation != generation,
                        let subscriber = try? PresenceSubscriber(endpoint: update)
                    {
                        for user in users { try? subscriber.subscribe(user) }
                        subscribers[node] = (generation, subscriber)
                    }
                    guard let (generation, subscriber) = subscribers[node] else { continue }
                    while let record = try? subscriber.next(timeout: 0) {
                        recorder.add(
                            FaultRecording.Arrival(
                                node: node, generation: generation, atMs: recorder.nowMs, record: record))
                    }
                }
                pause(milliseconds: 3)
            }
        }

        /// After the last heal: waits until every node is live, then until their answers to `query` agree on what
        /// each user sees, within the lease + 1 s; then makes one last change per user and waits until whole records
        /// agree (`seq` included) and show those changes, on every node's answers and subscriber. Returns what failed.
        static func converge(
            _ cluster: FaultCluster, _ recorder: FaultRecorder, _ clients: FaultClients, healedMs: Int
        ) throws -> [String] {
            var failures: [String] = []
            let bound = Self.leaseMs + 1_000
            for node in 0..<3 { try cluster.waitUntilLive(node) }
            let live = recorder.nowMs
            let alike = try agreement(cluster, full: false, within: bound) { _ in true }
            print(
                "cluster fault run: every node live \(live - healedMs) ms after the last heal; what users see "
                    + "alike on every node \(alike.took.map { "\($0) ms" } ?? "never") later")
            if alike.took == nil { failures.append("nodes not alike within \(bound) ms: \(alike.differences)") }

            var finals: [UserID: String] = [:]
            // Kept to the end: a session ends when its client's connection closes.
            var kept: [FaultClient] = []
            defer { withExtendedLifetime(kept) {} }
            for index in users.indices {
                guard var client = clients.take(index) else { continue }
                if let text = client.finalChange() {
                    finals[client.user] = text
                } else {
                    failures.append("\(client.user)'s last change was not acknowledged")
                }
                kept.append(client)
            }
            let changed = recorder.nowMs
            let identical = try agreement(cluster, full: true, within: bound) { answers in
                answers.allSatisfy { answer in finals.allSatisfy { answer[$0.key]?.text == $0.value } }
            }
            print(
                "cluster fault run: whole records alike and showing every last change "
                    + "\(identical.took.map { "\($0) ms" } ?? "never") after those changes")
            if identical.took == nil {
                failures.append(
                    "records not identical, or not showing the last changes \(finals), within \(bound) ms of those "
                        + "changes: \(identical.differences)")
            }
            // The subscribers get the last changes too (their records are checked with the rest).
            let deadline = changed + bound + 2_000
            while recorder.nowMs < deadline {
                let arrivals = recorder.snapshot.arrivals
                let shown = (0..<3).allSatisfy { node in
                    finals.allSatisfy { final in
                        arrivals.contains {
                            $0.node == node && $0.record.user == final.key && $0.record.text == final.value
                        }
                    }
                }
                if shown { break }
                pause(milliseconds: 20)
            }
            return failures
        }

        /// Asks every node for every user until the answers agree (and satisfy `done`) or `within` ms pass; returns
        /// how long that took (`nil` if they never did) and the last differences.
        static func agreement(
            _ cluster: FaultCluster, full: Bool, within: Int, _ done: ([[UserID: PresenceRecord]]) -> Bool
        ) throws -> (took: Int?, differences: [String]) {
            let clients = try (0..<3).map {
                try CommandClient(endpoint: cluster.endpoints($0).command, timeoutMilliseconds: 1_000)
            }
            let start = ContinuousClock.now
            var differences: [String] = []
            while true {
                let answers = clients.map { (try? $0.query(users)) ?? [:] }
                differences = FaultChecker.differences(answers, users: users, full: full)
                let took = ContinuousClock.now - start
                if differences.isEmpty && done(answers) {
                    return (
                        Int(took.components.seconds * 1_000 + took.components.attoseconds / 1_000_000_000_000_000), []
                    )
                }
                if took > .milliseconds(within) { return (nil, differences) }
                pause(milliseconds: 20)
            }
        }
    }
}
