import Foundation
import RollCallClient
import RollCallCore
import RollCallTestSupport
import Testing

extension Integration {
    /// The smallest scenario found for the sessions the cluster fault run saw outlive their `bye`.
    @Suite("Cluster writes held by a stopped etcd member", .serialized)
    struct ClusterStalePutTests {
        let alice = UserID(validating: "alice")!

        /// A status written while the node's etcd member is stopped goes, after the timeout, to the next member; the
        /// session then ends with `bye`. When the stopped member runs again it must not bring the session back with
        /// the put it held: alice stays offline everywhere.
        @Test func aSessionEndedAfterARetriedPutStaysEnded() throws {
            // Node a tries member 0 first, then member 1; b and c talk to members 1 and 2. A 6 s lease: the put is
            // node a's first call to member 0 after the stop (keep-alives every 2 s).
            let cluster = try ClusterFixture(leaseMs: 6_000) { $0 == 0 ? [0, 1] : [1, 2] }
            let onB = try cluster.subscriber(1, alice)
            let a = try cluster.client(0)
            let session = try a.hello(PresenceCore.Hello(user: alice, ttlMilliseconds: 600_000)).session
            try onB.wait(for: "alice online") { $0.status == .online }

            let stopped = ContinuousClock.now
            cluster.etcd.pause(0)
            for text in ["held1", "held2", "held3"] {
                try a.setStatus(session, .busy, text: text)
                Thread.sleep(forTimeInterval: 0.2)  // paces the writes; decides nothing
            }
            try onB.wait(for: "alice's last status, written on member 1", timeout: 10_000) { $0.text == "held3" }
            try a.bye(session)
            try onB.wait(for: "alice offline", timeout: 10_000) { $0.status == .offline && $0.reason == .bye }
            cluster.etcd.resume(0)
            print("cluster: member 0 stopped for \(ContinuousClock.now - stopped)")
            try onB.drain(milliseconds: 3_000)
            let byeAt = onB.records.lastIndex { $0.record.reason == .bye }!
            let after = onB.records[(byeAt + 1)...].map(\.record)
            print("cluster: alice on node b: \(onB.records.map { FaultChecker.describe($0.record) })")
            let answer = try cluster.client(1).query([alice])[alice]
            #expect(
                !after.contains { $0.status.isAvailable },
                "alice back after her bye: \(after.map(FaultChecker.describe))")
            #expect(answer?.status == .offline)
        }
    }
}
