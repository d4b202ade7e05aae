import Foundation
import RollCallClient
import RollCallCore
import RollCallTestSupport
import Testing

extension Integration {
    /// Issue #21 item 4: a seeded, randomized fault run over three nodes and three etcd members that no one can
    /// tune to. `ROLLCALL_FAULT_SEED` replays a run's schedule; `ROLLCALL_FAULT_SECONDS` (30 by default) makes it
    /// longer; `ROLLCALL_FAULT_DUMP=path` writes every request, reply and record there (docs/cluster.md, "The seeded
    /// fault run").
    ///
    /// Scoping, each following what the docs promise and no more (a join replays etcd's history, and then none of
    /// the snapshot's allowances below is used; it loads a snapshot when the replay is not through within half the
    /// lease, which a loaded machine can make happen):
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
    /// - An available user's `last_seen` in a `query` answer is the answering node's time (protocol §9.1).
    ///
    /// The two bugs this run found are fixed, and checked as plain expectations: one `seq` named two records after
    /// a node read a snapshot (`ClusterSnapshotSeqTests`), and a session ended while an etcd member was stopped came
    /// back with a put that member held (`ClusterStalePutTests`, `ClusterNodeTests.aLateCopyOfAWriteChangesNothing`).
    /// One check is a known issue: `since` after a snapshot (weakness 10).
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
            // Found by this run, fixed (`ClusterSnapshotSeqTests`): a node that read a snapshot after joining again
            // published a user's second change in it at the next revision's seq, another record on the other nodes.
            check("one seq names one record on all nodes", FaultChecker.oneSeqOneRecord(recording))
            // Weakness 10: a node that loaded a snapshot (a join replays etcd's history instead, unless it is
            // compacted or long) may give an available user another `since` than the nodes that watched, under the
            // same seq, until the user's next status change.
            withKnownIssue(
                "a node that loaded a snapshot takes since from the session, not the history", isIntermittent: true
            ) {
                check("one seq names one record, since included", FaultChecker.sinceAfterASnapshot(recording))
            }
            check("acknowledged changes visible or superseded", FaultChecker.acknowledgedChangesSurvive(recording))
            // Found by this run, fixed (`ClusterNodeTests.aLateCopyOfAWriteChangesNothing`): a put held by a stopped
            // etcd member, carried out after the session's end, brought the session back until its node died.
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
