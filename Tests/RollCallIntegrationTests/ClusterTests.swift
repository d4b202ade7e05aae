import Foundation
import RollCallClient
import RollCallCore
import RollCallTestSupport
import RollCallWire
import Testing

/// Three `rollcall serve` processes as nodes of one cluster, on a real three-member etcd on loopback.
final class ClusterFixture {
    let etcd: EtcdCluster
    let leaseMs: Int64
    /// More arguments for every node (CURVE's, for one).
    let arguments: [String]
    /// The key the fixture's own clients use, with CURVE.
    let credentials: CurveCredentials?
    private(set) var nodes: [BrokerProcess]
    /// Where each node keeps its state, when the nodes have data directories (each its own, under one folder).
    let dataRoot: URL?
    /// Each node's arguments, to start it again (``restartNode(_:)``).
    private var nodeArguments: [[String]] = []

    /// Starts etcd and one node per name; `members(i)` names the etcd members node `i` may talk to (all by
    /// default). Returns once every node is live.
    init(
        nodes names: [String] = ["a", "b", "c"], leaseMs: Int64 = 2_000, arguments: [String] = [],
        credentials: CurveCredentials? = nil, dataDirectories: Bool = false, members: (Int) -> [Int]? = { _ in nil }
    ) throws {
        self.credentials = credentials
        etcd = try EtcdCluster(members: 3)
        self.leaseMs = leaseMs
        self.arguments = arguments
        dataRoot =
            dataDirectories
            ? FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-cluster-\(UUID())") : nil
        nodes = []
        do {
            for (index, name) in names.enumerated() {
                let chosen = members(index) ?? Array(etcd.members.indices)
                try start(name, members: chosen)
            }
            for index in nodes.indices { try waitForState(index, .live) }
        } catch {
            shutdown()
            throw error
        }
    }

    deinit { shutdown() }

    func shutdown() {
        for node in nodes where node.isRunning { node.stop() }
        etcd.shutdown()
        if let dataRoot { try? FileManager.default.removeItem(at: dataRoot) }
    }

    /// Starts node `name` on the etcd members `members`, with its own data directory if the nodes have them.
    private func start(_ name: String, members: [Int]) throws {
        let url = "etcd://" + members.map { etcd.members[$0].endpoint }.joined(separator: ",")
        var given = ["--cluster", url, "--node-id", name, "--node-lease-ms", "\(leaseMs)"] + arguments
        if let dataRoot { given += ["--data-dir", dataRoot.appendingPathComponent(name).path] }
        nodes.append(try BrokerProcess(executable: ChildProcess.rollcall, arguments: given))
        nodeArguments.append(given)
    }

    /// Stops node `index` (SIGTERM, or SIGKILL with `kill`) and starts it again with the same arguments (its data
    /// directory included); returns once it is live.
    func restartNode(_ index: Int, kill: Bool = false) throws {
        if kill { nodes[index].kill() } else { nodes[index].stop() }
        nodes[index] = try BrokerProcess(executable: ChildProcess.rollcall, arguments: nodeArguments[index])
        try waitForState(index, .live)
    }

    func client(_ index: Int, timeoutMilliseconds: Int = 3_000) throws -> CommandClient {
        try CommandClient(
            endpoint: nodes[index].command, timeoutMilliseconds: timeoutMilliseconds, credentials: credentials)
    }

    /// Starts one more node, `name`, on every etcd member; returns its index once it is live.
    func startNode(_ name: String) throws -> Int {
        try start(name, members: Array(etcd.members.indices))
        try waitForState(nodes.count - 1, .live)
        return nodes.count - 1
    }

    /// A subscriber of `user` on node `index`, once its subscription is known to be in place (its last value came).
    func subscriber(_ index: Int, _ user: UserID) throws -> RecordLog {
        let subscriber = try PresenceSubscriber(endpoint: nodes[index].update)
        try subscriber.subscribe(user)
        let log = RecordLog(subscriber)
        _ = try log.wait(for: "the last value of \(user) on node \(index)", timeout: 5_000) { $0.user == user }
        return log
    }

    /// Waits until node `index` says, in `ping`, that it stands in `state`.
    func waitForState(_ index: Int, _ state: ClusterStanding.State, timeout: Duration = .seconds(15)) throws {
        let client = try client(index, timeoutMilliseconds: 500)
        var last: ClusterStanding?
        try Self.until("node \(index) \(state)", timeout: timeout, last: { String(describing: last) }) {
            last = (try? client.ping())?.cluster
            return last?.state == state ? true : nil
        }
    }

    /// Asks `probe` every 20 ms until it answers, for at most `timeout`; then throws, saying `what` and `last()`.
    @discardableResult
    static func until<T>(
        _ what: String, timeout: Duration = .seconds(10), last: () -> String = { "" }, _ probe: () throws -> T?
    ) throws -> T {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let found = try probe() { return found }
            Thread.sleep(forTimeInterval: 0.02)
        }
        throw TestFailure("not within \(timeout): \(what); last: \(last())")
    }
}

/// Every record a subscriber got, in order, with when it came.
final class RecordLog {
    let subscriber: PresenceSubscriber
    private(set) var records: [(at: ContinuousClock.Instant, record: PresenceRecord)] = []

    init(_ subscriber: PresenceSubscriber) { self.subscriber = subscriber }

    /// Reads what has arrived, waiting at most `milliseconds` for the first.
    func drain(milliseconds: Int = 0) throws {
        var wait = milliseconds
        while let record = try subscriber.next(timeout: wait) {
            records.append((ContinuousClock.now, record))
            wait = 0
        }
    }

    /// Waits until a record matching `predicate` has come (counting those already read); returns it and when.
    @discardableResult
    func wait(
        for what: String, timeout: Int = 10_000, _ predicate: (PresenceRecord) -> Bool
    ) throws -> (at: ContinuousClock.Instant, record: PresenceRecord) {
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while true {
            if let found = records.first(where: { predicate($0.record) }) { return found }
            let left = deadline - ContinuousClock.now
            guard left > .zero else {
                throw TestFailure("no \(what) within \(timeout) ms; got \(records.map(\.record))")
            }
            if let record = try subscriber.next(timeout: max(1, Int(left.components.seconds * 1_000))) {
                records.append((ContinuousClock.now, record))
            }
        }
    }
}

extension Integration {
    /// Issue #12: nodes of one cluster behave as one broker.
    @Suite("Cluster of rollcall serve nodes", .serialized)
    struct ClusterTests {
        let alice = UserID(validating: "alice")!
        let bob = UserID(validating: "bob")!
        let carol = UserID(validating: "carol")!

        func hello(_ user: UserID, _ status: Status = .online) -> PresenceCore.Hello {
            // A long TTL: these clients do not heartbeat.
            PresenceCore.Hello(user: user, status: status, ttlMilliseconds: 600_000)
        }

        /// A node started after the users' changes publishes their records as the nodes that watched them did,
        /// `seq`, `since` and `last_seen` included (issue #21, item 1): it replays etcd's history rather than
        /// reading a snapshot. Alice's text changed after her status (her `since` is the status's), bob said bye
        /// (a snapshot has no key of his session any more). `last_seen` of an available user is left out: it is
        /// each node's time of the answer (protocol §17.5).
        @Test func aNodeStartedLaterPublishesTheSameRecords() throws {
            let cluster = try ClusterFixture(nodes: ["a", "b"])
            let aliceOnB = try cluster.subscriber(1, alice)
            let bobOnB = try cluster.subscriber(1, bob)
            let a = try cluster.client(0)
            let aliceSession = try a.hello(hello(alice)).session
            try a.setStatus(aliceSession, .busy, text: "first")
            try a.setStatus(aliceSession, .busy, text: "second")
            let bobSession = try a.hello(hello(bob)).session
            try a.bye(bobSession)
            try aliceOnB.wait(for: "alice's second text on node b") { $0.text == "second" }
            try bobOnB.wait(for: "bob's bye on node b") { $0.reason == .bye }
            let b = try cluster.client(1)
            let c = try cluster.client(try cluster.startNode("c"))
            func comparable(_ records: [UserID: PresenceRecord]) -> [UserID: PresenceRecord] {
                records.mapValues { record in
                    var record = record
                    if record.status.isAvailable { record.lastSeen = nil }
                    return record
                }
            }
            let onB = comparable(try b.query([alice, bob]))
            let onC = comparable(try c.query([alice, bob]))
            print("cluster: on node b: \(onB.values.map(FaultChecker.describe).sorted())")
            print("cluster: on node c, started later: \(onC.values.map(FaultChecker.describe).sorted())")
            #expect(onC == onB)
        }

        /// A change made on one node reaches subscribers on every node as the same record with the same seq; a
        /// user's sessions on two nodes are merged into one record everywhere; `query` answers alike on every node;
        /// a group defined on one node has the same members and counts on the others.
        @Test func everyNodePublishesTheSameRecords() async throws {
            let cluster = try ClusterFixture()
            let logs = try (0..<3).map { try cluster.subscriber($0, alice) }
            let a = try cluster.client(0)
            let b = try cluster.client(1)

            let onA = try a.hello(hello(alice)).session
            let first = try logs.map { try $0.wait(for: "alice online") { $0.status == .online }.record }
            #expect(first[0] == first[1] && first[1] == first[2])
            #expect(first[0].sessions == 1)

            let onB = try b.hello(hello(alice, .busy)).session
            let merged = try logs.map { try $0.wait(for: "alice's two sessions") { $0.sessions == 2 }.record }
            #expect(merged[0] == merged[1] && merged[1] == merged[2])
            #expect(merged[0].status == .online && merged[0].seq > first[0].seq)

            try a.bye(onA)
            let busy = try logs.map {
                try $0.wait(for: "alice busy on b alone") { $0.status == .busy && $0.sessions == 1 }.record
            }
            #expect(busy[0] == busy[1] && busy[1] == busy[2])
            print("cluster: records on three nodes identical; seqs \(first[0].seq), \(merged[0].seq), \(busy[0].seq)")

            // query reads the same state everywhere (last_seen of an available user is each node's now).
            for index in 0..<3 {
                let record = try cluster.client(index).query([alice])[alice]
                #expect(record?.status == .busy && record?.seq == busy[0].seq && record?.sessions == 1)
            }

            // A group defined on node a, its counts read on b and c as members change.
            let team = GroupID(validating: "team")!
            _ = try a.group(team, GroupEdit(members: [alice, bob, carol]))
            let c = try cluster.client(2)  // kept: its connection carries bob's session
            _ = try c.hello(hello(bob))
            for index in 1..<3 {
                let client = try cluster.client(index)
                let deadline = ContinuousClock.now + .seconds(10)
                var snapshot = try client.group(team)
                while snapshot.counts.available != 2, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                    snapshot = try client.group(team)
                }
                #expect(snapshot.counts == StatusCounts(online: 1, busy: 1, offline: 1))
                #expect(snapshot.members.map(\.user) == [alice, bob, carol])
            }
            try b.bye(onB)

            // Changes of one session that reach the node in one burst (one loop round) arrive one by one, in order.
            let pipeline = try RequestPipeline(endpoint: cluster.nodes[0].command)
            let dave = UserID(validating: "dave")!
            let daves = try cluster.subscriber(2, dave)
            let granted = try pipeline.call(.hello(hello(dave)))
            guard let session = granted["session"]?.string else { throw TestFailure("no session: \(granted)") }
            let texts = (0..<50).map { "t\($0)" }
            for text in texts {
                try pipeline.send(
                    Codec.encodeRequest(.status(session: SessionID(session), status: .online, text: text)))
            }
            try pipeline.drain()
            try daves.wait(for: "dave's last text") { $0.text == texts.last }
            #expect(daves.records.compactMap(\.record.text) == texts)
        }

        /// kill -9 of a node: its users go offline on every other node, reason node_lost, within the lease and
        /// 1 s.
        @Test func aKilledNodesUsersGoOfflineEverywhere() throws {
            let cluster = try ClusterFixture()
            let logs = try [1, 2].map { try cluster.subscriber($0, alice) }
            let a = try cluster.client(0)
            _ = try a.hello(hello(alice))
            for log in logs { try log.wait(for: "alice online") { $0.status == .online } }
            let killed = ContinuousClock.now
            cluster.nodes[0].kill()
            for (index, log) in logs.enumerated() {
                let offline = try log.wait(for: "alice offline", timeout: 10_000) {
                    $0.status == .offline && $0.seq > 0
                }
                let took = offline.at - killed
                print("cluster: node killed; alice offline on node \(index + 1) after \(took) (lease 2 s)")
                #expect(offline.record.reason == .nodeLost)
                #expect(took < .milliseconds(cluster.leaseMs + 1_000))
            }
        }

        /// kill -9 of a node: its user's node_lost record is byte for byte the same on both other nodes (since,
        /// last_seen and seq included): the end is stamped once, in etcd, by the first node to see it, and every node
        /// publishes that stamp instead of its own clock's time.
        @Test func aKilledNodesUsersEndWithOneRecordEverywhere() throws {
            let cluster = try ClusterFixture()
            let subscribers = try [1, 2].map { index in
                let subscriber = try PresenceSubscriber(endpoint: cluster.nodes[index].update)
                try subscriber.subscribe(alice)
                return subscriber
            }
            /// The body of the first message on `subscriber` whose record matches `predicate`.
            func body(
                _ what: String, on subscriber: PresenceSubscriber, _ predicate: (PresenceRecord) -> Bool
            ) throws -> [UInt8] {
                let deadline = ContinuousClock.now + .seconds(10)
                while ContinuousClock.now < deadline {
                    if let message = try subscriber.nextMessage(timeout: 100),
                        let record = try? Codec.decodeRecord(message.body), predicate(record)
                    {
                        return message.body
                    }
                }
                throw TestFailure("no \(what) within 10 s")
            }
            for subscriber in subscribers { _ = try body("alice's last value", on: subscriber) { _ in true } }
            let a = try cluster.client(0)
            _ = try a.hello(hello(alice))
            for subscriber in subscribers { _ = try body("alice online", on: subscriber) { $0.status == .online } }
            let killed = ContinuousClock.now
            cluster.nodes[0].kill()
            let ends = try subscribers.map { subscriber in
                try body("alice node_lost", on: subscriber) { $0.status == .offline && $0.reason == .nodeLost }
            }
            let took = ContinuousClock.now - killed
            let texts = ends.map { String(decoding: $0, as: UTF8.self) }
            print(
                "cluster: node killed; alice's node_lost on nodes b and c after \(took):\n  \(texts[0])\n  \(texts[1])")
            #expect(ends[0] == ends[1], "not byte-identical: \(texts)")
            #expect(took < .milliseconds(cluster.leaseMs + 1_000))
        }

        /// A client library session knows two nodes; its node is killed and it says hello on the other before the
        /// dead node's lease runs out: nobody sees its user offline.
        @Test func failingOverInTimeShowsNoOneOffline() throws {
            let cluster = try ClusterFixture()
            let logs = try [1, 2].map { try cluster.subscriber($0, alice) }
            let session = try PresenceSession(
                endpoints: [cluster.nodes[0].command, cluster.nodes[1].command], hello: hello(alice),
                timeoutMilliseconds: 1_000)
            defer { session.close() }
            for log in logs { try log.wait(for: "alice online") { $0.status == .online } }
            let killed = ContinuousClock.now
            cluster.nodes[0].kill()
            while session.endpoint != cluster.nodes[1].command, ContinuousClock.now - killed < .seconds(5) {
                Thread.sleep(forTimeInterval: 0.002)
            }
            print("cluster: the session moved to node b \(ContinuousClock.now - killed) after the kill")
            #expect(session.endpoint == cluster.nodes[1].command)
            // The dead node's session ends (node_lost) within the lease; alice keeps her session on b.
            for log in logs {
                let both = try log.wait(for: "alice on a and b", timeout: 5_000) { $0.sessions == 2 }.record
                try log.wait(for: "alice with one session after the lease", timeout: 10_000) {
                    $0.status == .online && $0.sessions == 1 && $0.seq > both.seq
                }
                try log.drain(milliseconds: 500)
                let statuses = log.records.dropFirst().map(\.record.status)
                print(
                    "cluster: fail-over; records seen: \(log.records.dropFirst().map { "\($0.record.status)/\($0.record.sessions)" })"
                )
                #expect(!statuses.contains(.offline))
            }
        }

        /// etcd's leader is killed: presence keeps flowing after the election and nobody is shown offline.
        @Test func etcdLeaderLossCostsNoOnesPresence() throws {
            let cluster = try ClusterFixture()
            let log = try cluster.subscriber(2, alice)
            let a = try cluster.client(0)
            let session = try a.hello(hello(alice)).session
            try log.wait(for: "alice online") { $0.status == .online }
            guard let leader = cluster.etcd.leader() else { throw TestFailure("etcd has no leader") }
            let killed = ContinuousClock.now
            cluster.etcd.kill(leader)
            // Writes queue while there is no leader; the change arrives once there is one.
            try a.setStatus(session, .away)
            let away = try log.wait(for: "alice away", timeout: 10_000) { $0.status == .away }
            print("cluster: etcd leader killed; a change crossed nodes \(away.at - killed) later")
            try log.drain(milliseconds: Int(cluster.leaseMs) + 1_000)
            #expect(!log.records.dropFirst().contains { $0.record.status == .offline })
        }

        /// A session that ends while its node is frozen past its lease does not come back when the node joins again
        /// under a new lease: the node writes its live sessions again, and the bye queued meanwhile is taken first.
        @Test func aSessionEndedWhileCutOffStaysEnded() throws {
            let cluster = try ClusterFixture()
            let log = try cluster.subscriber(1, bob)
            let pipeline = try RequestPipeline(endpoint: cluster.nodes[0].command)
            let granted = try pipeline.call(.hello(hello(bob)))
            guard let session = granted["session"]?.string else { throw TestFailure("no session: \(granted)") }
            try log.wait(for: "bob online") { $0.status == .online }
            try cluster.nodes[0].freeze()
            // The bye waits in the frozen node's socket; the node reads it when it runs again, with its lease gone.
            try pipeline.send(Codec.encodeRequest(.bye(session: SessionID(session))))
            try log.wait(for: "bob lost with his node", timeout: 10_000) { $0.reason == .nodeLost }
            kill(cluster.nodes[0].pid, SIGCONT)
            try cluster.waitForState(0, .live)
            try log.drain(milliseconds: 1_500)
            let lost = log.records.firstIndex { $0.record.reason == .nodeLost }!
            let after = log.records[(lost + 1)...].map(\.record)
            print("cluster: after the frozen node's rejoin bob's records: \(after.map { "\($0.status)" })")
            #expect(!after.contains { $0.status.isAvailable })
        }

        /// Issue #21, honest under partition: a node cut off from etcd past its lease (its only member SIGSTOPped; its
        /// session already ended everywhere else as node_lost, its user online again on another node) answers a
        /// status and a heartbeat on its old session with cluster_unavailable, not ok; the refused change never shows
        /// anywhere, and the refused session does not come back, after the node joins again under a new lease.
        @Test func aNodePastItsLeaseAcknowledgesNothing() throws {
            // Node c talks to member 2 only; a and b to the other two, which expire c's lease.
            let cluster = try ClusterFixture(leaseMs: 3_000) { $0 == 2 ? [2] : [0, 1] }
            let log = try cluster.subscriber(0, carol)
            let c = try cluster.client(2)
            let session = try c.hello(hello(carol)).session
            try log.wait(for: "carol online") { $0.status == .online }

            let paused = ContinuousClock.now
            cluster.etcd.pause(2)
            let lost = try log.wait(for: "carol lost with node c's lease", timeout: 15_000) { $0.reason == .nodeLost }
            print("cluster: node c's lease ran out \(lost.at - paused) after its etcd member stopped (lease 3 s)")
            // Carol says hello on node b, as a client that failed over would (and stays connected).
            let b = try cluster.client(1)
            _ = try b.hello(hello(carol, .away))
            try log.wait(for: "carol away on node b") { $0.status == .away }

            // Node c, its lease gone, acknowledges nothing on its old session.
            #expect(rejection { try c.setStatus(session, .busy) } == .clusterUnavailable)
            #expect(rejection { try c.heartbeat(session) } == .clusterUnavailable)
            #expect(try c.ping().cluster?.state == .cutOff)

            cluster.etcd.resume(2)
            try cluster.waitForState(2, .live, timeout: .seconds(15))
            print("cluster: node c live again \(ContinuousClock.now - paused) after the pause began")
            // Once live again it serves, and the refused status never took effect anywhere. The refused session
            // does not come back with the node: carol is her session on node b alone, everywhere.
            try log.drain(milliseconds: 1_000)
            #expect(!log.records.contains { $0.record.status == .busy })
            let afterLoss = log.records.drop { $0.record.reason != .nodeLost }.dropFirst().map(\.record)
            print("cluster: carol's records after the loss: \(afterLoss.map { "\($0.status)/\($0.sessions)" })")
            #expect(!afterLoss.contains { $0.sessions > 1 || $0.status == .online })
            for client in [c, try cluster.client(0)] {
                let record = try client.query([carol])[carol]
                #expect(record?.status == .away && record?.sessions == 1)
            }
            #expect(rejection { try c.heartbeat(session) } == .unknownSession)
        }

        /// Issue #21, honest under partition: a change acknowledged inside the window is written when etcd answers,
        /// even if the node's lease ran out first: the session ends everywhere (node_lost) with the lease, and comes
        /// back with the acknowledged change when the node joins again under a new lease.
        @Test func aChangeAcknowledgedInTheWindowIsWrittenAfterAll() throws {
            // Node c talks to member 2 only. A 6 s lease: c serves until at least 2 s after its member stops.
            let cluster = try ClusterFixture(leaseMs: 6_000) { $0 == 2 ? [2] : [0, 1] }
            let log = try cluster.subscriber(0, carol)
            let c = try cluster.client(2)
            let session = try c.hello(hello(carol)).session
            try log.wait(for: "carol online") { $0.status == .online }

            let paused = ContinuousClock.now
            cluster.etcd.pause(2)
            try c.setStatus(session, .busy, text: "acknowledged")
            let acknowledged = ContinuousClock.now - paused
            #expect(acknowledged < .seconds(2))
            let lost = try log.wait(for: "carol lost with node c's lease", timeout: 15_000) { $0.reason == .nodeLost }
            cluster.etcd.resume(2)
            let busy = try log.wait(for: "carol's acknowledged change", timeout: 15_000) {
                $0.status == .busy && $0.text == "acknowledged"
            }
            #expect(busy.record.seq > lost.record.seq)
            print(
                "cluster: a status acknowledged \(acknowledged) after c's member stopped reached node a "
                    + "\(busy.at - paused) after the stop, under c's new lease")
        }

        /// A node cut off from etcd (its only etcd member SIGSTOPped) says so, refuses new sessions and reads with
        /// cluster_unavailable, and serves again once etcd answers, without a restart; nobody ends meanwhile.
        @Test func aCutOffNodeSaysSoAndComesBack() throws {
            // Node c talks to member 2 only; a and b to the other two.
            let cluster = try ClusterFixture(leaseMs: 6_000) { $0 == 2 ? [2] : [0, 1] }
            let log = try cluster.subscriber(0, carol)
            let c = try cluster.client(2)
            let session = try c.hello(hello(carol)).session
            try log.wait(for: "carol online") { $0.status == .online }

            let paused = ContinuousClock.now
            cluster.etcd.pause(2)
            try cluster.waitForState(2, .cutOff, timeout: .seconds(10))
            print("cluster: node c cut off \(ContinuousClock.now - paused) after its etcd member stopped (lease 6 s)")
            #expect(rejection { try c.hello(hello(bob)) } == .clusterUnavailable)
            #expect(rejection { try c.query([carol]) } == .clusterUnavailable)
            #expect(rejection { try c.group(GroupID(validating: "team")!) } == .clusterUnavailable)
            // Nor does it acknowledge anything on its sessions: the change could be lost with its lease.
            #expect(rejection { try c.setStatus(session, .busy) } == .clusterUnavailable)
            #expect(rejection { try c.heartbeat(session) } == .clusterUnavailable)
            // The other nodes still show carol: her node's lease has not run out.
            #expect(try cluster.client(0).query([carol])[carol]?.status == .online)

            cluster.etcd.resume(2)
            try cluster.waitForState(2, .live, timeout: .seconds(15))
            print("cluster: node c live again \(ContinuousClock.now - paused) after the pause began")
            _ = try c.hello(hello(bob))
            let back = try c.query([carol])[carol]
            #expect(back?.status == .online, "carol on c after the cut-off: \(String(describing: back))")
            // The refused status never took effect anywhere.
            #expect(try cluster.client(0).query([carol])[carol]?.status == .online)
            try log.drain(milliseconds: 200)
            #expect(!log.records.dropFirst().contains { $0.record.status == .offline })
        }
    }
}
