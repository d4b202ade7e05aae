import Foundation
import RollCallCluster
import RollCallTestSupport
import Synchronization
import Testing

/// What one node reported, for tests to wait on with deadlines.
final class NodeRecorder: Sendable {
    private let notifications = Mutex<[(at: ContinuousClock.Instant, ClusterNode.Notification)]>([])

    func record(_ notification: ClusterNode.Notification) {
        notifications.withLock { $0.append((ContinuousClock.now, notification)) }
    }

    /// Every change reported, in order, with when it arrived.
    var changes: [(at: ContinuousClock.Instant, change: ClusterReplica.Change)] {
        notifications.withLock { all in
            all.flatMap { entry -> [(at: ContinuousClock.Instant, change: ClusterReplica.Change)] in
                switch entry.1 {
                case .changes(let changes), .replayed(let changes), .snapshot(_, let changes):
                    return changes.map { (entry.at, $0) }
                default: return []
                }
            }
        }
    }

    /// The writes the node reported as dropped.
    var failedWrites: [ClusterNode.Write] {
        notifications.withLock { all in
            all.compactMap { entry in if case .writeFailed(let write, _) = entry.1 { write } else { nil } }
        }
    }

    var states: [NodeMembership.State] {
        notifications.withLock { all in
            all.compactMap { entry in if case .state(let state) = entry.1 { state } else { nil } }
        }
    }

    /// Waits until a change matching `predicate` has arrived; returns when it arrived.
    @discardableResult
    func wait(
        for what: String, timeout: Duration = .seconds(10), _ predicate: (ClusterReplica.Change) -> Bool
    ) async throws -> ContinuousClock.Instant {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let found = changes.first(where: { predicate($0.change) }) { return found.at }
            guard ContinuousClock.now < deadline else {
                let all = changes.map(\.change)
                throw ClusterTestFailure(
                    "no \(what) within \(timeout); \(all.count) changes, the last: \(all.suffix(5))")
            }
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// Waits until the node reports `state`.
    func wait(forState what: String, timeout: Duration = .seconds(10), _ predicate: (NodeMembership.State) -> Bool)
        async throws
    {
        let deadline = ContinuousClock.now + timeout
        while !states.contains(where: predicate) {
            guard ContinuousClock.now < deadline else {
                throw ClusterTestFailure("no state \(what) within \(timeout); states: \(states)")
            }
            try await Task.sleep(for: .milliseconds(1))
        }
    }
}

extension EtcdBacked {
    /// Cluster nodes (in this process, no broker) on a real three-member etcd.
    @Suite struct ClusterNodeTests {
        struct Running {
            let node: ClusterNode
            let recorder: NodeRecorder
        }

        /// Starts nodes `names`, each with every member as an endpoint, `first` first (the one its calls and its
        /// watch start on), and waits until all are live.
        func startNodes(
            _ names: [String], on cluster: EtcdCluster, leaseMs: Int64 = 3_000, first: Int = 0
        ) async throws -> [Running] {
            let members = [first] + cluster.members.indices.filter { $0 != first }
            let endpoints = members.map { EtcdEndpoint(host: "127.0.0.1", port: cluster.members[$0].clientPort) }
            var nodes: [Running] = []
            for name in names { nodes.append(try await startNode(name, endpoints: endpoints, leaseMs: leaseMs)) }
            return nodes
        }

        /// Starts node `name` on `endpoints`, in that order, and waits until it is live.
        func startNode(_ name: String, endpoints: [EtcdEndpoint], leaseMs: Int64 = 3_000) async throws -> Running {
            let recorder = NodeRecorder()
            let node = ClusterNode(
                configuration: .init(
                    endpoints: endpoints, nodeID: name, leaseMs: leaseMs, requestTimeout: .milliseconds(500)),
                notify: recorder.record)
            node.start()
            try await recorder.wait(forState: "live") { $0.isLive }
            return Running(node: node, recorder: recorder)
        }

        func isSession(_ id: String, _ change: ClusterReplica.Change) -> Bool {
            if case .sessionPut(let key, _, _) = change { return key.id == id }
            return false
        }

        /// A session written by one node reaches every node, and every node sees the same session and user changes at
        /// the same revisions.
        @Test func changesReachEveryNodeInTheSameOrder() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let nodes = try await startNodes(["a", "b", "c"], on: cluster)
            defer { nodes.forEach { $0.node.stop() } }
            for index in 0..<10 {
                let writer = nodes[index % 3].node
                writer.write(.putSession(id: "s\(index)", value: "user\(index)", user: ("user\(index)", "online")))
            }
            nodes[0].node.write(.endSession(id: "s0", user: ("user0", "offline")))
            nodes[1].node.write(.putGroup(id: "g", definition: "[user1,user2]"))
            for running in nodes {
                try await running.recorder.wait(for: "the group") { if case .groupPut = $0 { true } else { false } }
                try await running.recorder.wait(for: "s0 ended") {
                    if case .sessionEnded(let key, .ended, _) = $0 { key.id == "s0" } else { false }
                }
            }
            // Incarnations start at different times relative to each node's snapshot: compare the rest.
            func history(_ recorder: NodeRecorder) -> [ClusterReplica.Change] {
                recorder.changes.map(\.change).filter {
                    switch $0 {
                    case .incarnationStarted, .incarnationEnded: false
                    default: true
                    }
                }
            }
            // One seq base for all, written by the first to join: the time it joined, in ms × 1000.
            let base = try #require(nodes[0].node.seqBase)
            #expect(nodes.allSatisfy { $0.node.seqBase == base })
            let now = UInt64(Date().timeIntervalSince1970 * 1_000) * 1_000
            #expect(base <= now && base > now - 60_000_000)
            let first = history(nodes[0].recorder)
            // 10 sessions and 10 user records, s0's end and its user record, the group.
            let expected = 23
            #expect(first.count == expected)
            #expect(history(nodes[1].recorder) == first)
            #expect(history(nodes[2].recorder) == first)
            print(
                "\(first.count) changes, identical on 3 nodes, revisions \(first.first!.revision)...\(first.last!.revision)"
            )
        }

        /// A node that dies (stops renewing its lease) loses its sessions on every other node within the lease plus
        /// one second, as lost with their node.
        @Test func aDeadNodesSessionsEndEverywhere() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let nodes = try await startNodes(["a", "b", "c"], on: cluster, leaseMs: 2_000)
            defer { nodes.forEach { $0.node.stop() } }
            nodes[0].node.write(.putSession(id: "s1", value: "ann", user: nil))
            nodes[0].node.write(.putSession(id: "s2", value: "bob", user: nil))
            for running in nodes.dropFirst() { try await running.recorder.wait(for: "s2") { isSession("s2", $0) } }
            nodes[0].node.abandon()
            let died = ContinuousClock.now
            for running in nodes.dropFirst() {
                for id in ["s1", "s2"] {
                    let ended = try await running.recorder.wait(for: "\(id) lost") {
                        if case .sessionEnded(let key, .nodeLost, _) = $0 { key.id == id } else { false }
                    }
                    let elapsed = ended - died
                    print("lease 2 s: \(id) ended as node_lost \(elapsed) after its node died")
                    #expect(elapsed < .milliseconds(3_000))
                }
            }
        }

        /// Two nodes stamp one loss with different times: etcd keeps the first (its transaction succeeds only if no
        /// stamp is there), the second's transaction changes nothing, and both nodes read the first back through the
        /// watch, once. The stamp is under its writer's lease.
        @Test func theFirstStampOfALossWins() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let nodes = try await startNodes(["a", "b"], on: cluster)
            defer { nodes.forEach { $0.node.stop() } }
            let lost = ClusterKeys.Incarnation(node: "z", lease: 42)
            func stamps(_ recorder: NodeRecorder) -> [String] {
                recorder.changes.compactMap {
                    if case .lossStamped(lost, let value, _) = $0.change { value } else { nil }
                }
            }
            nodes[0].node.write(.stampLoss(lost, ending: "first"))
            for running in nodes {
                try await running.recorder.wait(for: "the first stamp") { _ in !stamps(running.recorder).isEmpty }
            }
            // The second stamp is sent before the user's key queued after it: once that key is back, it was sent.
            nodes[1].node.write(.stampLoss(lost, ending: "second"))
            nodes[1].node.write(.putUser(id: "after", record: "x"))
            for running in nodes {
                try await running.recorder.wait(for: "the write after the second stamp") {
                    if case .userPut("after", _, _) = $0 { true } else { false }
                }
                #expect(stamps(running.recorder) == ["first"])
            }
            let stored = try await offThread { try cluster.client().range(ClusterKeys().key(.lost(lost))) }
            #expect(stored.kvs.map(\.value) == ["first"])
            #expect(stored.kvs.first?.lease == nodes[0].node.incarnation?.lease)
        }

        /// A node that restarts under the same name ends its previous run's sessions at once (it revokes the old
        /// lease), rather than when the old lease runs out.
        @Test func aRestartedNodeEndsItsOldSessionsAtOnce() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let nodes = try await startNodes(["a", "b"], on: cluster, leaseMs: 30_000)
            defer { nodes.forEach { $0.node.stop() } }
            nodes[0].node.write(.putSession(id: "s1", value: "ann", user: nil))
            try await nodes[1].recorder.wait(for: "s1") { isSession("s1", $0) }
            nodes[0].node.abandon()
            let restarted = try await startNodes(["a"], on: cluster, leaseMs: 30_000)
            defer { restarted.forEach { $0.node.stop() } }
            let start = ContinuousClock.now
            let ended = try await nodes[1].recorder.wait(for: "s1 lost", timeout: .seconds(5)) {
                if case .sessionEnded(let key, .nodeLost, _) = $0 { key.id == "s1" } else { false }
            }
            print("restarted node ended its old run's session \(ended - start) after it went live (lease 30 s)")
            #expect(ended - start < .seconds(5))
        }

        /// A node whose lease was lost (as when it expired while the node was cut off) says so, joins again with a new
        /// lease, and writes its live sessions again, so that they are back everywhere.
        @Test func rejoinsWithANewLeaseAndItsSessions() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let nodes = try await startNodes(["a", "b"], on: cluster, leaseMs: 3_000)
            defer { nodes.forEach { $0.node.stop() } }
            nodes[0].node.write(.putSession(id: "s1", value: "ann", user: nil))
            try await nodes[1].recorder.wait(for: "s1") { isSession("s1", $0) }
            let old = try #require(nodes[0].node.incarnation)
            try cluster.client().revoke(lease: old.lease)
            let revoked = ContinuousClock.now
            try await nodes[1].recorder.wait(for: "s1 lost") {
                if case .sessionEnded(let key, .nodeLost, _) = $0 { key.id == "s1" } else { false }
            }
            try await nodes[0].recorder.wait(forState: "joining") { $0 == .joining(attempt: 0) }
            let back = try await nodes[1].recorder.wait(for: "s1 under a new lease") {
                if case .sessionPut(let key, _, _) = $0 { key.id == "s1" && key.incarnation != old } else { false }
            }
            print("lease revoked under a live node: its session back everywhere \(back - revoked) later")
            #expect(back - revoked < .milliseconds(3_000))
            try await nodes[0].recorder.wait(forState: "live again") { _ in nodes[0].node.state.isLive }
            #expect(nodes[0].node.incarnation != old)
        }

        /// A write that finds the node's lease gone before a keep-alive does (here: revoked under it; in life: expired
        /// while the node could not reach etcd) is not dropped: the node joins again at once and the change reaches
        /// every node under the new lease.
        @Test func aWriteThatFindsTheLeaseGoneIsWrittenUnderTheNewOne() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            // A 30 s lease: the next keep-alive is up to 10 s away, so the write is what finds the lease gone.
            let nodes = try await startNodes(["a", "b"], on: cluster, leaseMs: 30_000)
            defer { nodes.forEach { $0.node.stop() } }
            nodes[0].node.write(.putSession(id: "s1", value: "ann", user: nil))
            try await nodes[1].recorder.wait(for: "s1") { isSession("s1", $0) }
            let old = try #require(nodes[0].node.incarnation)
            try cluster.client().revoke(lease: old.lease)
            try await nodes[1].recorder.wait(for: "s1 lost") {
                if case .sessionEnded(let key, .nodeLost, _) = $0 { key.id == "s1" } else { false }
            }
            let written = ContinuousClock.now
            nodes[0].node.write(.putSession(id: "s1", value: "ann, busy", user: nil))
            let back = try await nodes[1].recorder.wait(for: "s1's change under a new lease") {
                guard case .sessionPut(let key, "ann, busy", _) = $0 else { return false }
                return key.id == "s1" && key.incarnation != old
            }
            print("a write found its lease gone: written under a new lease \(back - written) later")
            #expect(back - written < .seconds(5))
            #expect(nodes[0].recorder.failedWrites.isEmpty)
        }

        /// Node a reaching the members `relayed` through a ``HoldingRelay`` each (the others directly), node b reaching
        /// every member directly, and node a's session s1 known to node b: what the tests of late copies start from.
        struct Relayed {
            let cluster: EtcdCluster
            /// By member index.
            let relays: [Int: HoldingRelay]
            let a: Running
            let b: Running
            /// Node a's incarnation once s1 is written.
            let first: ClusterKeys.Incarnation
        }

        /// Runs `body` on a ``Relayed`` set-up, and stops everything after.
        func withRelayed(
            _ relayed: Set<Int>, leaseMs: Int64 = 3_000, _ body: (Relayed) async throws -> Void
        ) async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            var relays: [Int: HoldingRelay] = [:]
            defer { relays.values.forEach { $0.stop() } }
            for index in relayed.sorted() {
                relays[index] = try HoldingRelay(upstreamPort: cluster.members[index].clientPort)
            }
            let endpoint = { (index: Int) in
                EtcdEndpoint(host: "127.0.0.1", port: relays[index]?.port ?? cluster.members[index].clientPort)
            }
            let direct = { (index: Int) in EtcdEndpoint(host: "127.0.0.1", port: cluster.members[index].clientPort) }
            let a = try await startNode("a", endpoints: cluster.members.indices.map(endpoint), leaseMs: leaseMs)
            defer { a.node.stop() }
            let b = try await startNode("b", endpoints: [direct(1), direct(2), direct(0)], leaseMs: leaseMs)
            defer { b.node.stop() }
            a.node.write(.putSession(id: "s1", value: "ann", user: nil))
            try await b.recorder.wait(for: "s1") { isSession("s1", $0) }
            let first = try #require(a.node.incarnation)
            try await body(Relayed(cluster: cluster, relays: relays, a: a, b: b, first: first))
        }

        /// What a relay looks for in node a's requests that write one of its sessions: the prefix of its session keys
        /// (keys travel as bytes in etcd's protobuf messages).
        static let nodeASessionKeys = ClusterKeys().prefix + "sessions/a/"

        /// The incarnation of a put of s1 under another incarnation than `first` (written again by a join).
        static func s1Rewritten(_ change: ClusterReplica.Change, after first: ClusterKeys.Incarnation)
            -> ClusterKeys.Incarnation?
        {
            guard case .sessionPut(let key, _, _) = change, key.id == "s1", key.incarnation != first else { return nil }
            return key.incarnation
        }

        /// Writes s2 through node a and waits until node b has it: everything node a wrote before has reached b.
        func writeS2AndWait(_ set: Relayed) async throws {
            set.a.node.write(.putSession(id: "s2", value: "bob", user: nil))
            try await set.b.recorder.wait(for: "s2") { isSession("s2", $0) }
        }

        /// Revokes node a's first lease and waits until node b sees s1 written again by node a's join (`what`).
        func revokeAndAwaitRejoin(_ set: Relayed, _ what: String) async throws {
            try set.cluster.client().revoke(lease: set.first.lease)
            try await set.b.recorder.wait(for: what) { Self.s1Rewritten($0, after: set.first) != nil }
        }

        /// Runs `scenario`, and once more if a member did not answer a request the relay held: etcd drops a request
        /// whose deadline passed while it was held (seen under load in CI), and then nothing shows what a late copy
        /// would do. Any other failure, and a second miss, fail the test.
        func onceMoreIfNotAnswered(_ scenario: () async throws -> Void) async throws {
            do {
                try await scenario()
            } catch let failure as ClusterTestFailure where failure.description.contains("did not answer the held") {
                print("ClusterNodeTests: \(failure); the scenario once more")
                try await scenario()
            }
        }

        /// The values of every session key in etcd.
        func sessionValues(_ cluster: EtcdCluster) throws -> [String] {
            try cluster.client().range(ClusterKeys().prefix + "sessions/", prefix: true).kvs.map(\.value).sorted()
        }

        /// A write the node gave up on and its member carried out later, after the node's next writes, changes
        /// nothing: a session's put held that way does not bring the session back after its end (the fault run's
        /// bug 2). The member is reached through a relay that holds the put until the session has ended.
        @Test func aLateCopyOfAWriteChangesNothing() async throws {
            // A 30 s lease: no keep-alive is due for 10 s, so the put is node a's first call after the hold.
            try await onceMoreIfNotAnswered {
                try await withRelayed([0], leaseMs: 30_000) { set in
                    let relay = set.relays[0]!
                    relay.hold()
                    set.a.node.write(.putSession(id: "s1", value: "ann, busy", user: nil))
                    try await set.b.recorder.wait(for: "s1 busy, sent again to member 1") {
                        if case .sessionPut(let key, "ann, busy", _) = $0 { key.id == "s1" } else { false }
                    }
                    set.a.node.write(.endSession(id: "s1", user: nil))
                    try await set.b.recorder.wait(for: "s1's end") {
                        if case .sessionEnded(let key, .ended, _) = $0 { key.id == "s1" } else { false }
                    }
                    relay.release()
                    guard relay.waitForLateAnswer(timeout: .seconds(10)) else {
                        throw ClusterTestFailure("member 0 did not answer the held put within 10 s")
                    }
                    try await writeS2AndWait(set)

                    #expect(try sessionValues(set.cluster) == ["bob"])
                    let changes = set.b.recorder.changes.map(\.change)
                    let end = try #require(
                        changes.firstIndex {
                            if case .sessionEnded(let key, _, _) = $0 { key.id == "s1" } else { false }
                        })
                    #expect(!changes[(end + 1)...].contains { isSession("s1", $0) }, "s1 back after its end on node b")
                    #expect(set.a.recorder.failedWrites.isEmpty)
                }
            }
        }

        /// A join the node gave up on and its member carried out later changes nothing: a node that joins again
        /// (its lease was revoked) writes its sessions again under the new lease, and a copy of that transaction held
        /// until one of those sessions has ended does not bring it back. The member is reached through a relay that
        /// holds the first of node a's requests that writes a session after the revocation: the join.
        @Test func aLateCopyOfAJoinChangesNothing() async throws {
            try await onceMoreIfNotAnswered {
                try await withRelayed([0]) { set in
                    let relay = set.relays[0]!
                    relay.hold(matching: Self.nodeASessionKeys)
                    try await revokeAndAwaitRejoin(set, "s1 written again by node a's join, sent again to member 1")
                    set.a.node.write(.endSession(id: "s1", user: nil))
                    try await set.b.recorder.wait(for: "s1's end under the new lease") {
                        if case .sessionEnded(let key, .ended, _) = $0 {
                            key.id == "s1" && key.incarnation != set.first
                        } else {
                            false
                        }
                    }
                    relay.release()
                    guard relay.waitForLateAnswer(timeout: .seconds(10)) else {
                        throw ClusterTestFailure("member 0 did not answer the held join within 10 s")
                    }
                    try await writeS2AndWait(set)

                    #expect(try sessionValues(set.cluster) == ["bob"])
                    #expect(set.a.recorder.failedWrites.isEmpty)
                }
            }
        }

        /// A join that failed on every member, carried out later by them, shows nothing: the node revokes that
        /// lease once its next join has gone through. Three relays, one in front of each member, each hold node a's
        /// first request that writes a session after its lease was revoked: the join under its second lease.
        @Test func aFailedJoinCarriedOutLaterShowsNothing() async throws {
            // A 9 s lease: the second lease outlives the test, so that only its revocation can hide the late join.
            try await onceMoreIfNotAnswered {
                try await withRelayed([0, 1, 2], leaseMs: 9_000) { set in
                    let relays = set.relays.sorted { $0.key < $1.key }.map(\.value)
                    for relay in relays { relay.hold(matching: Self.nodeASessionKeys, connections: 1) }
                    // The second lease's join is held by all three; the third lease's goes through.
                    try await revokeAndAwaitRejoin(set, "s1 written again by node a's join under its third lease")
                    for relay in relays { relay.release() }
                    for (index, relay) in relays.enumerated() {
                        guard relay.waitForLateAnswer(timeout: .seconds(10)) else {
                            throw ClusterTestFailure("member \(index) did not answer the held join within 10 s")
                        }
                    }
                    try await writeS2AndWait(set)

                    // The incarnation node a is in now (it joins once more if a join's replay fails, as under load).
                    let joined = try #require(set.a.node.incarnation)
                    let sessions = try set.cluster.client().range(ClusterKeys().prefix + "sessions/", prefix: true)
                    let prefix = ClusterKeys().prefix + "sessions/\(joined)/"
                    #expect(sessions.kvs.map(\.value).sorted() == ["ann", "bob"])
                    #expect(sessions.kvs.allSatisfy { $0.key.hasPrefix(prefix) }, "\(sessions.kvs.map(\.key))")
                    #expect(set.a.recorder.failedWrites.isEmpty)
                }
            }
        }

        /// A join carried out whose answer was lost is the node's join: the client sends it again to the next
        /// member, which finds the incarnation's key there, and the node goes on under that lease (it does not join
        /// once more under another, which would show its sessions twice until the first lease ran out).
        @Test func aJoinWhoseAnswerWasLostIsTheJoin() async throws {
            try await withRelayed([0]) { set in
                let relay = set.relays[0]!
                relay.loseAnswers(matching: Self.nodeASessionKeys)
                try await revokeAndAwaitRejoin(set, "s1 written again by node a's join")
                relay.release()
                try await writeS2AndWait(set)

                let incarnations = set.b.recorder.changes.compactMap { Self.s1Rewritten($0.change, after: set.first) }
                #expect(incarnations.count == 1, "s1 written again under \(incarnations)")
                #expect(set.a.node.incarnation == incarnations.first)
                #expect(try sessionValues(set.cluster) == ["ann", "bob"])
                #expect(set.a.recorder.failedWrites.isEmpty)
            }
        }

        /// Two privacy choices of nearly a megabyte each and a session, queued together, all reach etcd: a
        /// transaction carries at most 512 KiB of values but for a single write, so that no request passes etcd's
        /// 1.5 MiB (in base64).
        @Test func largeWritesGoInTransactionsEtcdTakes() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let nodes = try await startNodes(["a", "b"], on: cluster)
            defer { nodes.forEach { $0.node.stop() } }
            let large = String(repeating: "y", count: 900_000)
            for user in ["u1", "u2"] {
                nodes[0].node.write(
                    .putPrivacy(ClusterKeys.PrivacyKey(user: user, field: .contacts), value: large))
            }
            nodes[0].node.write(.putSession(id: "s1", value: "ann", user: nil))
            try await nodes[1].recorder.wait(for: "s1, after both choices") { isSession("s1", $0) }
            let written = nodes[1].recorder.changes.compactMap { entry -> String? in
                if case .privacyPut(let key, _, _) = entry.change { key.user } else { nil }
            }
            #expect(written == ["u1", "u2"])
            #expect(nodes[0].recorder.failedWrites.isEmpty)
        }

        /// A node whose key moved under it (a late copy of its own write, carried out after the ones it sent
        /// since) takes the key back and goes on writing: nothing waits for ever, nothing is dropped.
        @Test func aNodeWhoseKeyMovedWritesOn() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let nodes = try await startNodes(["a", "b"], on: cluster, leaseMs: 30_000)
            defer { nodes.forEach { $0.node.stop() } }
            nodes[0].node.write(.putSession(id: "s1", value: "ann", user: nil))
            try await nodes[1].recorder.wait(for: "s1") { isSession("s1", $0) }
            let incarnation = try #require(nodes[0].node.incarnation)
            try cluster.client().put(ClusterKeys().key(.node(incarnation)), "{}", lease: incarnation.lease)
            nodes[0].node.write(.putSession(id: "s2", value: "bob", user: nil))
            try await nodes[1].recorder.wait(for: "s2, written after the node's key moved") { isSession("s2", $0) }
            #expect(nodes[0].recorder.failedWrites.isEmpty)
        }

        /// With every etcd member stopped for less than the lease, the node says it is cut off, then live again with
        /// the same lease, and its sessions never end.
        @Test func cutOffAndBack() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            // A 30 s lease: the node refuses sessions after 20 s, ten seconds before the lease can expire. Both delays
            // after that must fit in the margin: the worker's cut-off report waits for its stuck etcd call (1.5 s after
            // the refusal in one CI run), and after etcd is resumed the node took up to 3.5 s to be live again. With a
            // 9 s lease, the sum once went past the lease, and the node rejoined under a new one.
            let nodes = try await startNodes(["a", "b"], on: cluster, leaseMs: 30_000)
            defer { nodes.forEach { $0.node.stop() } }
            nodes[0].node.write(.putSession(id: "s1", value: "ann", user: nil))
            try await nodes[1].recorder.wait(for: "s1") { isSession("s1", $0) }
            let lease = try #require(nodes[0].node.incarnation).lease
            for member in cluster.members.indices { cluster.pause(member) }
            let paused = ContinuousClock.now
            do {
                defer { for member in cluster.members.indices { cluster.resume(member) } }
                let deadline = paused + .seconds(24)
                while nodes[0].node.acceptsSessions, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(1))
                }
                let refused = ContinuousClock.now - paused
                // Two thirds of the lease (20 s), counted from the last answered call, sent before the stop; the
                // bound leaves a second for a loaded machine and still falls well before the lease could expire.
                // Decided by the worker alone, it came after 5.03 s of a 6 s lease (a keep-alive and a probe
                // waiting on 3 members).
                print("etcd stopped: node refuses sessions after \(refused) (lease 30 s, two thirds of it: 20 s)")
                #expect(refused < .milliseconds(21_000))
                try await nodes[0].recorder.wait(forState: "cut off", timeout: .seconds(3)) {
                    if case .cutOff = $0 { true } else { false }
                }
                print("etcd stopped: node reports cut off after \(ContinuousClock.now - paused)")
                #expect(nodes[0].node.state.isLive == false)
            }
            try await nodes[0].recorder.wait(forState: "live again", timeout: .seconds(10)) { _ in
                nodes[0].node.state == .live(lease: lease)
            }
            print("etcd back: node live again with the same lease \(ContinuousClock.now - paused) after the stop")
            // A later write still reaches the other node, and nothing ended.
            nodes[0].node.write(.putSession(id: "s2", value: "bob", user: nil))
            try await nodes[1].recorder.wait(for: "s2") { isSession("s2", $0) }
            #expect(!nodes[1].recorder.changes.contains { if case .sessionEnded = $0.change { true } else { false } })
        }

        /// With etcd's leader killed, changes keep flowing after the election and no session ends.
        @Test func etcdLeaderLoss() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let nodes = try await startNodes(["a", "b"], on: cluster, leaseMs: 5_000)
            defer { nodes.forEach { $0.node.stop() } }
            nodes[0].node.write(.putSession(id: "s1", value: "ann", user: nil))
            try await nodes[1].recorder.wait(for: "s1") { isSession("s1", $0) }
            let leader = try #require(cluster.leader())
            cluster.kill(leader)
            let killed = ContinuousClock.now
            nodes[0].node.write(.putSession(id: "s2", value: "bob", user: nil))
            let seen = try await nodes[1].recorder.wait(for: "s2 after the election") { isSession("s2", $0) }
            print("etcd leader killed: a change crossed nodes \(seen - killed) later")
            #expect(seen - killed < .seconds(5))
            // A write the other way crosses too: both nodes work on the new leader, nobody is lost, both are live.
            nodes[1].node.write(.putSession(id: "s3", value: "cid", user: nil))
            try await nodes[0].recorder.wait(for: "s3 from b") { isSession("s3", $0) }
            #expect(nodes.allSatisfy { $0.node.state.isLive })
            #expect(!nodes[1].recorder.changes.contains { if case .sessionEnded = $0.change { true } else { false } })
        }

        /// A burst of changes written on one node, queued for longer than the lease lasts, arrives whole and in order
        /// on another, and the writer keeps its lease meanwhile; prints the changes per second and the cross-node
        /// latency of single changes (figures, not asserted beyond generous bounds). Sent one transaction per
        /// change with the renewal waiting for the queue, 3,000 changes cost the writer its lease (5 s) after 2,100.
        @Test func burstArrivesWholeAndInOrder() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let nodes = try await startNodes(["a", "b"], on: cluster, leaseMs: 2_000)
            defer { nodes.forEach { $0.node.stop() } }
            // Cross-node latency: one change at a time, written on a, seen on b.
            var latencies: [Duration] = []
            for index in 0..<100 {
                let start = ContinuousClock.now
                nodes[0].node.write(.putSession(id: "l\(index)", value: "u", user: nil))
                let seen = try await nodes[1].recorder.wait(for: "l\(index)") { isSession("l\(index)", $0) }
                latencies.append(seen - start)
            }
            latencies.sort()
            print("cross-node latency of one change: p50 \(latencies[50]), p99 \(latencies[99]) (100 changes)")
            #expect(latencies[99] < .seconds(2))
            let count = 20_000
            let start = ContinuousClock.now
            for index in 0..<count { nodes[0].node.write(.putSession(id: "b\(index)", value: "u\(index)", user: nil)) }
            let last = "b\(count - 1)"
            let done = try await nodes[1].recorder.wait(for: last, timeout: .seconds(60)) { isSession(last, $0) }
            let seconds =
                Double((done - start).components.attoseconds) / 1e18 + Double((done - start).components.seconds)
            let burst = nodes[1].recorder.changes.compactMap { entry -> String? in
                if case .sessionPut(let key, _, _) = entry.change, key.id.hasPrefix("b") { return key.id }
                return nil
            }
            print(
                "burst: \(burst.count) changes written on a, seen on b in \(done - start): \(Int(Double(count) / seconds))/s"
            )
            #expect(burst == (0..<count).map { "b\($0)" })
            #expect(!nodes[1].recorder.changes.contains { if case .sessionEnded = $0.change { true } else { false } })
            #expect(nodes[0].node.state.isLive)
        }

        /// A node whose watch member falls silent (SIGSTOP) notices that its own writes do not come back, starts the
        /// watch again on another member, finds the history it missed compacted, and catches up from a fresh
        /// snapshot: what changed meanwhile arrives, deletions included.
        @Test func silentWatchThenCompactionResyncs() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            // The nodes' calls and watches start on a follower, so that stopping it needs no election.
            let leader = try #require(cluster.leader())
            let silent = leader == 0 ? 1 : 0
            let nodes = try await startNodes(["a", "b"], on: cluster, leaseMs: 3_000, first: silent)
            defer { nodes.forEach { $0.node.stop() } }
            nodes[0].node.write(.putSession(id: "s1", value: "ann", user: nil))
            try await nodes[1].recorder.wait(for: "s1") { isSession("s1", $0) }
            let s1 = try #require(
                nodes[1].recorder.changes.compactMap { entry -> ClusterKeys.SessionKey? in
                    if case .sessionPut(let key, _, _) = entry.change, key.id == "s1" { return key }
                    return nil
                }.first)
            // Both nodes watch through that follower. Stop it, change things through the others
            // at once, and compact the history away before any watch can move.
            cluster.pause(silent)
            defer { cluster.resume(silent) }
            let paused = ContinuousClock.now
            let others = EtcdClient(
                endpoints: cluster.members.indices.filter { $0 != silent }.map {
                    EtcdEndpoint(host: "127.0.0.1", port: cluster.members[$0].clientPort)
                },
                requestTimeout: .seconds(3))
            let keys = ClusterKeys()
            try others.put(keys.key(.user("zed")), "written while the watch was silent")
            let last = try others.delete(keys.key(.session(s1)))
            try others.compact(revision: last)
            let compacted = ContinuousClock.now - paused
            let seen = try await nodes[1].recorder.wait(for: "zed, from a snapshot", timeout: .seconds(15)) {
                if case .userPut("zed", _, let revision) = $0 { revision >= last } else { false }
            }
            try await nodes[1].recorder.wait(for: "s1 ended, from the snapshot") {
                if case .sessionEnded(let key, .ended, _) = $0 { key == s1 } else { false }
            }
            print(
                "silent watch member: history compacted \(compacted) after the stop; caught up \(seen - paused) after")
            #expect(compacted < .seconds(1))
            #expect(seen - paused < .seconds(10))
        }
    }
}
