import Foundation
import RollCallBroker
import RollCallClient
import RollCallCluster
import RollCallCore
import RollCallTestSupport
import RollCallWebhooks
import Synchronization
import Testing

@testable import RollCallServer

extension Integration {
    /// Issue #22 on a cluster: one node delivers each URL at a time, and another continues from the cursor kept in
    /// etcd when it dies (docs/webhooks.md, "On a cluster").
    @Suite("Webhooks from a cluster", .serialized)
    struct ClusterWebhookTests {
        /// The node that holds `url` in etcd now, by name; `nil` while none does.
        static func owner(of url: String, in cluster: ClusterFixture) throws -> String? {
            try cluster.etcd.value(of: "/rollcall/v1/webhooks/owner/" + url).map { String($0.prefix { $0 != "/" }) }
        }

        /// Waits until the status page of each of `nodes` says that node `holder` delivers the URL: as "delivering" on
        /// the holder's own page, with its name on the others'.
        static func waitForStatusPages(
            of cluster: ClusterFixture, nodes: [Int], naming holder: String, of names: [String]
        ) async throws {
            var last: [String: Any]?
            for node in nodes {
                let port = try #require(Int(cluster.nodes[node].http?.split(separator: ":").last ?? ""))
                func row() throws -> [String: Any]? {
                    try WebhookTests.statusRows(port: port).first { $0["type"] as? String == "presence.changed" }
                }
                do {
                    try await waitFor(seconds: 10) {
                        last = try? row()
                        return (last?["holder"] as? String)?.hasPrefix(holder + "/") == true
                            && last?["delivering"] as? Bool == (names[node] == holder)
                    }
                } catch {
                    throw TestFailure("node \(names[node])'s status page: \(String(describing: last))")
                }
            }
        }

        /// Two nodes' cursor stores on one etcd: the first to ask holds the URL, and the other may neither deliver it
        /// nor move its cursor; outside its window the holder delivers nothing; once the holder's lease is gone, the
        /// other takes the URL over and reads the cursor the holder saved.
        @Test func oneNodeAtATimeHoldsAURLAndItsCursor() throws {
            let etcd = try EtcdCluster(members: 1)
            defer { etcd.shutdown() }
            let endpoints = etcd.members.map { EtcdEndpoint(host: "127.0.0.1", port: $0.clientPort) }
            let client = EtcdClient(endpoints: endpoints)
            defer { client.shutdown() }
            let serving = Mutex<[String: ClusterKeys.Incarnation?]>([:])
            func store(_ node: String) throws -> ClusterWebhookCursors {
                let lease = try client.grant(ttlSeconds: 60).id
                serving.withLock { $0[node] = ClusterKeys.Incarnation(node: node, lease: lease) }
                return ClusterWebhookCursors(settings: ClusterSettings(endpoints: endpoints, nodeID: node)) {
                    serving.withLock { $0[node] ?? nil }
                }
            }
            let url = "http://127.0.0.1:9/hook"
            let a = try store("a")
            let b = try store("b")
            let first = a.deliveryRight(for: url)
            let firstTerm = try #require(first.term)
            let aHolds = try #require(serving.withLock { $0["a"] ?? nil }).description
            #expect(first.holder == aHolds)
            #expect(b.deliveryRight(for: url) == DeliveryRight(term: nil, holder: aHolds), "b is told who delivers")
            #expect(a.deliveryRight(for: url) == first, "asking again keeps it")
            // The owner key made anew under a's very lease, as when a lost the URL and took it back: what a knew of
            // the cursor before may be stale, so its saves are refused until it asks again.
            let ownerKey = "/rollcall/v1/webhooks/owner/" + url
            _ = try client.delete(ownerKey)
            _ = try client.put(ownerKey, aHolds, lease: try #require(serving.withLock { $0["a"] ?? nil }).lease)
            #expect(throws: WebhookDeliveryFenced.self) { try a.save(WebhookCursor(acknowledged: 5), for: url) }
            let retaken = a.deliveryRight(for: url)
            #expect(retaken.term != nil && retaken.term != firstTerm)
            let term = try #require(retaken.term)
            try a.save(WebhookCursor(acknowledged: 7, unacknowledgedThrough: 9, unacknowledgedSince: 1_700), for: url)
            #expect(throws: WebhookDeliveryFenced.self) { try b.save(WebhookCursor(acknowledged: 99), for: url) }
            #expect(
                try b.cursor(for: url)
                    == WebhookCursor(acknowledged: 7, unacknowledgedThrough: 9, unacknowledgedSince: 1_700))

            let held = try #require(serving.withLock { $0["a"] ?? nil })
            serving.withLock { $0["a"] = .some(nil) }  // cut off: it delivers nothing, and saves nothing
            #expect(a.deliveryRight(for: url) == .unknown)
            #expect(throws: WebhookDeliveryFenced.self) { try a.save(WebhookCursor(acknowledged: 8), for: url) }
            try client.revoke(lease: held.lease)  // its lease ran out
            let taken = b.deliveryRight(for: url)
            #expect(taken.term.map { $0 != term } == true)
            #expect(taken.holder?.hasPrefix("b/") == true)
            #expect(try b.cursor(for: url)?.acknowledged == 7)
            try b.save(WebhookCursor(acknowledged: 9), for: url)
            #expect(try a.cursor(for: url) == WebhookCursor(acknowledged: 9))
        }

        /// Three nodes with data directories are all given the URL; one holds it. Changes made on another node reach
        /// the receiver; the holder is killed with SIGKILL; once its lease ran out another node takes the URL over
        /// and every transition of the log reaches the receiver, each batch in offset order and the first copies of
        /// all of them too, signed.
        @Test func anotherNodeContinuesWhenTheDeliveringOneDies() async throws {
            let (path, secret) = try WebhookTests.secretFile()
            defer { try? FileManager.default.removeItem(atPath: path) }
            let receiver = try WebhookReceiver(secret: secret)
            try await receiver.serve { url in
                let cluster = try ClusterFixture(
                    arguments: [
                        "--webhook-url", url, "--webhook-secret-file", path, "--webhook-batch-ms", "10",
                        "--http-endpoint", "127.0.0.1:0",
                    ],
                    dataDirectories: true)
                let names = ["a", "b", "c"]
                let holder = try ClusterFixture.until("a node holding the URL") { try Self.owner(of: url, in: cluster) }
                let killed = try #require(names.firstIndex(of: holder))
                let survivor = (killed + 1) % 3
                try await Self.waitForStatusPages(of: cluster, nodes: [0, 1, 2], naming: holder, of: names)
                let client = try cluster.client(survivor)  // open to the end: its close would end the sessions
                let alice = try client.hello(.init(user: "alice".id, ttlMilliseconds: 600_000)).session
                try client.setStatus(alice, .busy, text: "call")
                func logged() throws -> [UInt64] {
                    try cluster.client(survivor).events(after: 0, limit: 1_000).entries.map(\.offset)
                }
                try await waitFor(seconds: 10) {
                    guard let log = try? logged(), log.count >= 2 else { return false }
                    return Set(receiver.deliveredOffsets).isSuperset(of: log.suffix(2))
                }

                // One node delivers: nothing came twice so far (three delivering nodes would send each thrice).
                let beforeKill = receiver.deliveredOffsets
                #expect(Set(beforeKill).count == beforeKill.count, "delivered more than once: \(beforeKill)")

                cluster.nodes[killed].kill()
                _ = try client.hello(.init(user: "bob".id, ttlMilliseconds: 600_000))
                try client.setStatus(alice, .away)
                let next = try ClusterFixture.until("another node holding the URL", timeout: .seconds(15)) {
                    try Self.owner(of: url, in: cluster).flatMap { $0 == holder ? nil : $0 }
                }
                print("cluster webhooks: \(holder) delivered, killed; \(next) took over")
                let survivors = [0, 1, 2].filter { $0 != killed }
                try await Self.waitForStatusPages(of: cluster, nodes: survivors, naming: next, of: names)
                let first = try #require(receiver.deliveredOffsets.min())
                try await waitFor(seconds: 15) {
                    guard let log = try? logged(), log.count >= 4 else { return false }
                    return Set(receiver.deliveredOffsets).isSuperset(of: log.filter { $0 >= first })
                }
                #expect(try logged().filter { $0 >= first }.count >= 4)
                let delivered = receiver.deliveredOffsets
                var firstCopies: [UInt64] = []
                for offset in delivered where !firstCopies.contains(offset) { firstCopies.append(offset) }
                #expect(firstCopies == firstCopies.sorted())
                for delivery in receiver.deliveries {
                    let offsets = WebhookReceiver.offsets(delivery)
                    #expect(offsets == offsets.sorted())
                }
                #expect(receiver.deliveries.allSatisfy { $0.signed })
                print("cluster webhooks: \(delivered.count) offsets delivered, \(firstCopies.count) distinct")
            }
        }
    }
}
