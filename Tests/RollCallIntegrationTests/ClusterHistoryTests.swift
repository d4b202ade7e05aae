import Foundation
import RollCallClient
import RollCallCore
import RollCallTestSupport
import RollCallWire
import Testing

extension Integration {
    /// Issue #22 on a cluster: every node with a data directory keeps the presence log, under the cluster's epoch,
    /// with the same offsets for the same transitions, so that a client continues on another node from the offset
    /// it has (docs/history.md, "On a cluster").
    @Suite("Presence log on a cluster", .serialized)
    struct ClusterHistoryTests {
        let alice = UserID(validating: "alice")!
        let bob = UserID(validating: "bob")!

        func hello(_ user: UserID, _ status: Status = .online) -> PresenceCore.Hello {
            PresenceCore.Hello(user: user, status: status, ttlMilliseconds: 600_000)
        }

        /// The whole log of node `index` once it holds at least `count` entries (nodes log what etcd's watch
        /// brings them, each in its own time).
        func log(of cluster: ClusterFixture, _ index: Int, atLeast count: Int) throws -> [LogEntry] {
            let client = try cluster.client(index)
            var last: [LogEntry] = []
            return try ClusterFixture.until("\(count) entries in node \(index)'s log", last: { "\(last.count)" }) {
                last = try client.events(after: 0, limit: 1_000).entries
                return last.count >= count ? last : nil
            }
        }

        /// Changes made on two nodes are logged by both at the same offsets, under one epoch; a reader continues on
        /// node b from an offset node a gave it; a node started later (which replays etcd's history) logs the same;
        /// a node killed with SIGKILL and started again on its data directory still has them, and logs the next
        /// change at the same offset as the others.
        @Test func everyNodeLogsTheSameTransitionsAtTheSameOffsets() throws {
            let cluster = try ClusterFixture(nodes: ["a", "b"], dataDirectories: true)
            let a = try cluster.client(0)
            let b = try cluster.client(1)
            let aliceSession = try a.hello(hello(alice)).session
            try a.setStatus(aliceSession, .busy, text: "in a call")
            _ = try b.hello(hello(bob, .away))
            try a.bye(aliceSession)

            let onA = try log(of: cluster, 0, atLeast: 4)
            let onB = try log(of: cluster, 1, atLeast: 4)
            print("cluster log: on node a: \(onA.map { "\($0.offset) \(FaultChecker.describe($0.record))" })")
            #expect(
                onA.map { "\($0.record.user) \($0.record.status)" }.sorted()
                    == ["alice busy", "alice offline", "alice online", "bob away"])
            #expect(onA == onB)
            #expect(onA.allSatisfy { $0.record.offset == $0.offset })
            let epochs = try [a, b].map { try #require($0.ping().log).epoch }
            #expect(epochs[0] == epochs[1])

            // A reader moves from node a to node b in the middle of the feed.
            let firstPage = try a.events(after: 0, logEpoch: epochs[0], limit: 2)
            let rest = try b.events(after: try #require(firstPage.next), logEpoch: epochs[0], limit: 1_000)
            #expect(firstPage.entries + rest.entries == onA)

            let c = try cluster.startNode("c")
            #expect(try log(of: cluster, c, atLeast: 4) == onA)
            #expect(try cluster.client(c).ping().log?.epoch == epochs[0])

            // Bob's session goes with node b's killed run (node_lost), and alice comes back on the new run.
            try cluster.restartNode(1, kill: true)
            #expect(try log(of: cluster, 1, atLeast: 4).prefix(4) == onA[...])
            let bAgain = try cluster.client(1)  // open to the end: its close would end alice's session
            _ = try bAgain.hello(hello(alice, .busy))
            let next = try (0..<3).map { try log(of: cluster, $0, atLeast: 6) }
            #expect(next[0] == next[1] && next[1] == next[2])
            #expect(
                next[0].dropFirst(4).map { "\($0.record.user) \($0.record.status)" }.sorted()
                    == ["alice busy", "bob offline"])
        }

        /// A node outside its window reads no log, as it answers no `query`: its log may lag the cluster's, and a
        /// page would look caught up. Back in its window, it reads again, with what it missed meanwhile.
        @Test func aCutOffNodeReadsNoLog() throws {
            // Node b talks to member 2 only; a to the other two. A long lease: node a rides out an election if the
            // paused member led.
            let cluster = try ClusterFixture(nodes: ["a", "b"], leaseMs: 6_000, dataDirectories: true) {
                $0 == 1 ? [2] : [0, 1]
            }
            let a = try cluster.client(0)
            let b = try cluster.client(1)
            let session = try a.hello(hello(alice)).session
            let epoch = try #require(try a.ping().log?.epoch)
            _ = try log(of: cluster, 1, atLeast: 1)

            cluster.etcd.pause(2)
            try cluster.waitForState(1, .cutOff, timeout: .seconds(10))
            try ClusterFixture.until("alice away through node a") { try? a.setStatus(session, .away) }
            #expect(rejection { try b.events(after: 0, logEpoch: epoch) } == .clusterUnavailable)
            #expect(rejection { try b.history(HistoryQuery(user: alice, limit: 10)) } == .clusterUnavailable)

            cluster.etcd.resume(2)
            try cluster.waitForState(1, .live, timeout: .seconds(15))
            let onA = try log(of: cluster, 0, atLeast: 2)
            #expect(try log(of: cluster, 1, atLeast: 2) == onA)
        }

        /// A node that joins after etcd compacted the history it would replay loads a snapshot instead: its log has
        /// a hole, so a cursor from before it is refused with `snapshot_required` (never answered with what the node
        /// has, which would skip the hole), while a cursor from the node's own offset continues with the same
        /// entries as the other nodes.
        @Test func aNodeStartedFromASnapshotRefusesCursorsFromBeforeIt() throws {
            let cluster = try ClusterFixture(nodes: ["a"], dataDirectories: true)
            let a = try cluster.client(0)
            let aliceSession = try a.hello(hello(alice)).session
            try a.setStatus(aliceSession, .away)
            let before = try log(of: cluster, 0, atLeast: 2)
            try cluster.etcd.compact()

            let b = try cluster.client(try cluster.startNode("b"))
            let epoch = try #require(try a.ping().log?.epoch)
            let joined = try #require(try b.ping().log)
            #expect(joined.epoch == epoch)
            #expect(rejection { try b.events(after: 0, logEpoch: epoch) } == .snapshotRequired)
            #expect(rejection { try b.events(after: before[0].offset, logEpoch: epoch) } == .snapshotRequired)

            try a.setStatus(aliceSession, .busy)
            let onA = try log(of: cluster, 0, atLeast: 3)
            let later = try ClusterFixture.until("alice busy in node b's log") {
                let page = try b.events(after: joined.offset, logEpoch: epoch)
                return page.entries.contains { $0.record.status == .busy } ? page.entries : nil
            }
            #expect(later == onA.filter { $0.offset > joined.offset })
            #expect(try a.events(after: 0, logEpoch: epoch).entries == onA)
        }
    }
}
