import Foundation
import RollCallClient
import RollCallCore
import RollCallTestSupport
import Testing

extension Integration {
    /// The smallest scenario found for the one-seq violations of the cluster fault run (fixed: a revision publishes
    /// one record per user, BrokerMachine+Cluster.swift).
    @Suite("Cluster seqs after a rejoin", .serialized)
    struct ClusterSnapshotSeqTests {
        let carol = UserID(validating: "carol")!

        /// A node whose lease ran out while it was cut off joins again and reads a snapshot; the records it then
        /// publishes carry the same seqs as the other nodes' records of the same revisions: one seq, one record.
        @Test func aRejoinedNodesRecordsKeepTheClustersSeqs() throws {
            // Node c talks to member 2 only; a and b to the other two, which expire c's lease.
            let cluster = try ClusterFixture(leaseMs: 2_000) { $0 == 2 ? [2] : [0, 1] }
            let onA = try cluster.subscriber(0, carol)
            let onC = try cluster.subscriber(2, carol)
            let c = try cluster.client(2)
            let session = try c.hello(PresenceCore.Hello(user: carol, ttlMilliseconds: 600_000)).session
            for log in [onA, onC] { try log.wait(for: "carol online") { $0.status == .online } }

            // Cut off, c still acknowledges a change inside its window; the lease then runs out.
            cluster.etcd.pause(2)
            try c.setStatus(session, .busy, text: "acknowledged")
            try onA.wait(for: "carol lost with node c's lease", timeout: 15_000) { $0.reason == .nodeLost }
            cluster.etcd.resume(2)
            try cluster.waitForState(2, .live, timeout: .seconds(15))
            for log in [onA, onC] {
                try log.wait(for: "carol's acknowledged change", timeout: 15_000) { $0.text == "acknowledged" }
                try log.drain(milliseconds: 1_000)
            }
            let bySeq = Dictionary(grouping: (onA.records + onC.records).map(\.record)) { $0.seq }
            let clashes = bySeq.filter {
                $0.key > 0 && Set($0.value.map { "\(FaultChecker.comparable($0))" }).count > 1
            }
            print("cluster: carol on node a: \(onA.records.map { FaultChecker.describe($0.record) })")
            print("cluster: carol on node c: \(onC.records.map { FaultChecker.describe($0.record) })")
            #expect(clashes.isEmpty, "one seq, two records: \(clashes.values.map { $0.map(FaultChecker.describe) })")
        }
    }
}
