import Foundation
import RollCallClient
import RollCallCore
import RollCallSecurity
import RollCallTestSupport
import RollCallWire
import Testing

extension Integration {
    /// Issue #23 on a cluster: what a user chose on one node holds on every node, and a viewer who may not see the
    /// user gets the same record from every node (docs/privacy.md, "Clusters").
    @Suite("Privacy on a cluster", .serialized)
    struct ClusterPrivacyTests {
        /// Two nodes with CURVE keys bound to users. The backend (an operator key) sets alice's contacts through node
        /// a while alice chooses contacts-only through node b: both hold. Zoe, a stranger, reads the record of a
        /// bye, the same on both nodes to the seq and the millisecond; bob, a contact, reads alice busy on both; once
        /// alice blocks bob through node b, it holds there when acknowledged, and node a hides her from bob too; the
        /// operator reads the truth throughout.
        @Test func choicesMadeOnOneNodeHoldOnEveryNode() throws {
            let keys = try TestKeys("alice", "bob", "zoe", "op")
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "rollcall-cluster-privacy-\(getpid())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let secret = directory.appendingPathComponent("broker.key").path
            let table = directory.appendingPathComponent("authorized_keys").path
            try CertificateFile.create(
                Certificate(publicKey: CurveKey(keys.server.publicKey)!, secretKey: CurveKey(keys.server.secretKey)!),
                at: secret)
            try keys.table([("alice", "user alice"), ("bob", "user bob"), ("zoe", "user zoe"), ("op", "operator")])
                .write(toFile: table, atomically: true, encoding: .utf8)
            let cluster = try ClusterFixture(
                nodes: ["a", "b"], arguments: ["--curve-secret-key-file", secret, "--authorized-keys", table],
                credentials: keys.credentials("op"))
            func client(_ node: Int, _ name: String) throws -> CommandClient {
                try CommandClient(
                    endpoint: cluster.nodes[node].command, timeoutMilliseconds: 3_000,
                    credentials: keys.credentials(name))
            }
            let alice = "alice".id
            // Alice's connection stays open: its close would end her session.
            let aliceOnA = try client(0, "alice")
            _ = try aliceOnA.hello(.init(user: alice, status: .busy, text: "in a call", ttlMilliseconds: 600_000))
            // Alice's record is on both nodes before she hides it: a user hidden before her first record reaches a
            // node stays unknown to strangers there (seq 0), not the bye of a moment.
            for node in [0, 1] {
                let op = try client(node, "op")
                try ClusterFixture.until("alice busy on node \(node)") {
                    try op.query([alice])[alice].flatMap { $0.status == .busy ? $0 : nil }
                }
            }
            _ = try client(0, "op").call(.contacts(user: alice, .set(["bob".id])))
            _ = try client(1, "alice").call(.privacy(user: alice, visibility: .contacts, lastSeen: nil))

            let zoe = [try client(0, "zoe"), try client(1, "zoe")]
            let bob = [try client(0, "bob"), try client(1, "bob")]
            func record(_ client: CommandClient) throws -> PresenceRecord? { try client.query([alice])[alice] }
            let hidden = try [0, 1].map { node in
                try ClusterFixture.until("alice hidden from zoe on node \(node)") {
                    try record(zoe[node]).flatMap { $0.reason == .bye ? $0 : nil }
                }
            }
            print("cluster privacy: zoe reads \(hidden.map(FaultChecker.describe))")
            #expect(hidden[0] == hidden[1])
            #expect(hidden[0].reason == .bye && hidden[0].sessions == 0 && hidden[0].text == nil)
            #expect(hidden[0].since != nil && hidden[0].lastSeen == hidden[0].since)
            for node in [0, 1] {
                // The contacts written on node a and the policy written on node b both hold.
                try ClusterFixture.until("alice busy for bob on node \(node)") {
                    try record(bob[node]).flatMap { $0.status == .busy ? $0 : nil }
                }
            }

            // A ping pipelined behind the block on the same connection is answered after it: replies keep their
            // order while the block waits for etcd.
            let pipeline = try RequestPipeline(
                endpoint: cluster.nodes[1].command, credentials: keys.credentials("alice"))
            pipeline.collected = []
            try pipeline.send(Codec.encodeRequest(.block(user: alice, .add(["bob".id]))))
            try pipeline.send(Codec.encodeRequest(.ping))
            try pipeline.drain()
            let replies = (pipeline.collected ?? []).map { String(decoding: $0, as: UTF8.self) }
            #expect(replies.count == 2 && replies[0].contains(#""blocks":1"#) && replies[1].contains(#""epoch""#))
            // Answered once etcd has it and node b applies it: on node b it holds before the ok, with no wait.
            #expect(try record(bob[1])?.reason == .bye, "alice's block holds on node b when it is acknowledged")
            let blocked = try ClusterFixture.until("alice hidden from bob on node a") {
                try record(bob[0]).flatMap { $0.reason == .bye ? $0 : nil }
            }
            #expect(blocked.reason == .bye && blocked.text == nil)
            #expect(blocked.seq > hidden[0].seq)
            for node in [0, 1] {
                #expect(try record(try client(node, "op"))?.status == .busy, "the operator on node \(node)")
            }
        }
    }
}
