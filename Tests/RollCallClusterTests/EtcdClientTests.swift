import Foundation
import RollCallCluster
import RollCallTestSupport
import Synchronization
import Testing

extension EtcdBacked {
    /// The etcd client against a real three-member etcd cluster on loopback.
    @Suite struct EtcdClientTests {
        /// A put is read back at its revision, a delete removes the key, and a prefix read returns only that prefix.
        @Test func putRangeDelete() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client()
            let first = try client.put("/t/a", "{\"x\":1}")
            try client.put("/t/b", "é")
            try client.put("/u/c", "other")
            let range = try client.range("/t/", prefix: true)
            #expect(range.kvs.map(\.key) == ["/t/a", "/t/b"])
            #expect(range.kvs.map(\.value) == ["{\"x\":1}", "é"])
            #expect(range.kvs[0].modRevision == first)
            let deleted = try client.delete("/t/a")
            #expect(deleted > first)
            #expect(try client.range("/t/", prefix: true).kvs.map(\.key) == ["/t/b"])
            // The old revision still has the key.
            #expect(try client.range("/t/a", revision: first).kvs.map(\.value) == ["{\"x\":1}"])
        }

        /// A snapshot read in pages returns every key under the prefix, all at the revision of its first page.
        @Test func snapshotInPages() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client()
            for index in 0..<7 { try client.put("/p/\(index)", "v\(index)") }
            let snapshot = try client.snapshot(prefix: "/p/", pageSize: 3)
            #expect(snapshot.kvs.map(\.key) == (0..<7).map { "/p/\($0)" })
            #expect(snapshot.more == false)
            #expect(snapshot.revision == (try client.range("/p/0").revision))
        }

        /// A transaction runs its success branch when its conditions hold and its failure branch when they do not.
        @Test func transactions() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client()
            let created = try client.txn(
                compare: [.absent("/x/k")], success: [.put(key: "/x/k", value: "1", lease: 0)])
            #expect(created.succeeded)
            let again = try client.txn(
                compare: [.absent("/x/k")], success: [.put(key: "/x/k", value: "2", lease: 0)],
                failure: [.delete(key: "/x/", prefix: true)])
            #expect(again.succeeded == false)
            #expect(try client.range("/x/k").kvs.isEmpty)
            let guarded = try client.txn(
                compare: [EtcdCompare(key: "/x/k", .less, .modRevision(again.revision + 1))],
                success: [.put(key: "/x/k", value: "3", lease: 0)])
            #expect(guarded.succeeded)
        }

        /// A key under a lease lives while the lease is kept alive, goes at once on revoke, and a revoked lease can
        /// no longer be kept alive nor written under.
        @Test func leases() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client()
            let lease = try client.grant(ttlSeconds: 2)
            #expect(lease.ttlSeconds == 2)
            try client.put("/l/s", "session", lease: lease.id)
            #expect(try client.keepAlive(lease: lease.id) == 2)
            #expect(try client.range("/l/s").kvs.first?.lease == lease.id)
            try client.revoke(lease: lease.id)
            #expect(try client.range("/l/s").kvs.isEmpty)
            #expect(throws: EtcdError.leaseNotFound(lease.id)) { try client.keepAlive(lease: lease.id) }
            #expect(throws: EtcdError.leaseNotFound(lease.id)) { try client.put("/l/s", "again", lease: lease.id) }
        }

        /// A lease that is no longer kept alive expires within its TTL plus one second, and its keys' deletions reach a
        /// watch.
        @Test func leaseExpiryReachesAWatch() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client()
            let lease = try client.grant(ttlSeconds: 2)
            let revision = try client.put("/e/s", "session", lease: lease.id)
            let recorder = WatchRecorder()
            let watch = client.watch(prefix: "/e/", from: revision + 1, handler: recorder.record)
            defer { watch.cancel() }
            try client.keepAlive(lease: lease.id)
            let lastKeepAlive = ContinuousClock.now
            try await recorder.wait(for: "the lease's key deleted", timeout: .seconds(10)) { _ in
                recorder.events.contains { $0.kind == .delete && $0.kv.key == "/e/s" }
            }
            let elapsed = ContinuousClock.now - lastKeepAlive
            print("lease of 2 s: key deleted and watched \(elapsed) after the last keep-alive")
            #expect(elapsed < .milliseconds(3_000))
            #expect(elapsed > .milliseconds(1_500))
        }

        /// A watch from a revision delivers every later change once, in order, puts and deletes.
        @Test func watchDeliversChangesInOrder() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client()
            let start = try client.put("/w/before", "0")
            let recorder = WatchRecorder()
            let watch = client.watch(prefix: "/w/", from: start, handler: recorder.record)
            defer { watch.cancel() }
            for index in 1...20 { try client.put("/w/k\(index % 3)", "\(index)") }
            try client.delete("/w/k1")
            try client.put("/other/k", "not watched")
            try await recorder.wait(for: "22 events") { _ in recorder.events.count >= 22 }
            let events = recorder.events
            #expect(events.count == 22)
            #expect(events.first?.kv.key == "/w/before")
            #expect(events.dropFirst().prefix(20).map(\.kv.value) == (1...20).map(String.init))
            #expect(events.last?.kind == .delete)
            #expect(events.map(\.kv.modRevision) == events.map(\.kv.modRevision).sorted())
            #expect(watch.nextRevision == events.last!.kv.modRevision + 1)
        }

        /// A watch whose member is killed goes on from another member with nothing lost and nothing twice.
        @Test func watchSurvivesItsMembersDeath() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client()
            let recorder = WatchRecorder()
            let watch = client.watch(prefix: "/m/", from: 1, handler: recorder.record)
            defer { watch.cancel() }
            try await recorder.wait(for: "the watch set up") {
                $0.contains { if case .connected = $0 { true } else { false } }
            }
            for index in 0..<10 { try client.put("/m/k", "\(index)") }
            try await recorder.wait(for: "10 events") { _ in recorder.events.count >= 10 }
            // The watch and the client both started on member 0.
            cluster.kill(0)
            let killed = ContinuousClock.now
            // Member 0 may have led: wait out the election, so that each put below is applied exactly once.
            try await offThread { try cluster.waitUntilHealthy(timeout: .seconds(10)) }
            for index in 10..<20 { try client.put("/m/k", "\(index)") }
            try await recorder.wait(for: "20 events") { _ in recorder.events.count >= 20 }
            print(
                "watch moved to another member; 10 more events \(ContinuousClock.now - killed) after the kill (election included)"
            )
            #expect(recorder.events.map(\.kv.value) == (0..<20).map(String.init))
            #expect(recorder.all.contains { if case .disconnected = $0 { true } else { false } })
        }

        /// A watch that starts before the compacted revision says so and stops, instead of skipping changes.
        @Test func watchBehindCompactionSaysSo() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client()
            let first = try client.put("/c/k", "1")
            try client.put("/c/k", "2")
            let last = try client.put("/c/k", "3")
            try client.compact(revision: last)
            let recorder = WatchRecorder()
            let watch = client.watch(prefix: "/c/", from: first, handler: recorder.record)
            defer { watch.cancel() }
            try await recorder.wait(for: "compaction reported") { $0.contains(.compacted(last)) }
            #expect(recorder.events.isEmpty)
            #expect(throws: EtcdError.compacted(compactRevision: 0)) { try client.range("/c/k", revision: first) }
        }

        /// A member that stops answering (SIGSTOP) costs a call one attempt's timeout, then the next member answers.
        @Test func callsMoveOnFromAStoppedMember() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client(timeout: .milliseconds(500))
            try client.put("/s/k", "before")
            #expect(client.currentEndpoint.port == cluster.members[0].clientPort)
            // Stop a member that is not the leader, so that the rest keep a quorum and a leader.
            let leader = try #require(cluster.leader())
            let stopped = leader == 0 ? 1 : 0
            cluster.pause(stopped)
            defer { cluster.resume(stopped) }
            let client2 = EtcdClient(
                endpoints: [cluster.members[stopped], cluster.members[leader]].map {
                    EtcdEndpoint(host: "127.0.0.1", port: $0.clientPort)
                }, requestTimeout: .milliseconds(500))
            let start = ContinuousClock.now
            try client2.put("/s/k", "after")
            let elapsed = ContinuousClock.now - start
            print("a put with the first member stopped took \(elapsed)")
            #expect(elapsed < .milliseconds(1_500))
            #expect(client2.currentEndpoint.port == cluster.members[leader].clientPort)
            #expect(try client2.range("/s/k").kvs.first?.value == "after")
        }

        /// With the leader killed, writes go on after the election, within a few seconds.
        @Test func writesGoOnAfterTheLeaderDies() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client(timeout: .milliseconds(500))
            try client.put("/d/k", "0")
            let leader = try #require(cluster.leader())
            cluster.kill(leader)
            let killed = ContinuousClock.now
            var written = false
            while !written, ContinuousClock.now - killed < .seconds(10) {
                // Each attempt may wait out the election on every member: off the shared threads.
                written = try await offThread { (try? client.put("/d/k", "1")) != nil }
            }
            let elapsed = ContinuousClock.now - killed
            print("first write after the leader was killed: \(elapsed)")
            #expect(written)
            #expect(elapsed < .seconds(5))
            #expect(try client.range("/d/k").kvs.first?.value == "1")
        }

        /// A member that refuses connections (killed) costs a call no time: the client goes on to the next member
        /// at once, not after the connection timeout.
        @Test func callsMoveOnAtOnceFromARefusingMember() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            // Kill a member that is not the leader, so that no election delays the next member's answer.
            let leader = try #require(cluster.leader())
            let dead = leader == 0 ? 1 : 0
            cluster.kill(dead)
            let client = EtcdClient(
                endpoints: [cluster.members[dead], cluster.members[leader]].map {
                    EtcdEndpoint(host: "127.0.0.1", port: $0.clientPort)
                }, requestTimeout: .seconds(2))
            let start = ContinuousClock.now
            try client.put("/r/k", "v")
            let elapsed = ContinuousClock.now - start
            print("a put with the first member refusing connections took \(elapsed) (timeout 2 s)")
            #expect(elapsed < .milliseconds(1_000))
            #expect(client.currentEndpoint.port == cluster.members[leader].clientPort)
        }

        /// etcd answers most calls with a PING of its own (grpc-go estimating the bandwidth), and swift-nio-http2
        /// closes a connection that receives more than 200 of them within 30 s, failing the calls in flight: a client
        /// of one member makes 500 calls in a row, and every one succeeds, because it opens a new connection every
        /// ``EtcdConnection/maxCalls`` calls.
        @Test func manyCallsInARowAllSucceed() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.clientOfFirstMember(timeout: .seconds(2))
            defer { client.shutdown() }
            for index in 0..<500 { try client.put("/m/k", "\(index)") }
            #expect(try client.range("/m/k").kvs.first?.value == "499")
        }

        /// Calls from several threads at once on one member, across the connection's renewal every 100 calls, all
        /// succeed: a connection that has made its calls takes no more, and closes only when the last in flight ends.
        @Test func concurrentCallsAcrossNewConnectionsAllSucceed() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.clientOfFirstMember(timeout: .seconds(3))
            defer { client.shutdown() }
            let failures = try await offThread {
                let failures = Mutex<[String]>([])
                DispatchQueue.concurrentPerform(iterations: 4) { thread in
                    for index in 0..<100 {
                        do {
                            try client.put("/c/t\(thread)", "\(index)")
                        } catch {
                            failures.withLock { $0.append("\(error)") }
                        }
                    }
                }
                return failures.withLock { $0 }
            }
            #expect(failures.isEmpty, "\(failures.count) calls failed, the first: \(failures.first ?? "")")
            #expect(
                try (0..<4).map { try client.range("/c/t\($0)").kvs.first?.value } == Array(repeating: "99", count: 4))
        }

        /// A watch stopped by a compaction has ended its threads (the stream's included) without `cancel()`, and a
        /// `cancel()` after it returns at once.
        @Test func aWatchStoppedByACompactionEndsItsThreads() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client()
            defer { client.shutdown() }
            let first = try client.put("/t/k", "0")
            let last = try client.put("/t/k", "1")
            try client.compact(revision: last)
            let before = watchThreads()
            let recorder = WatchRecorder()
            let watch = client.watch(prefix: "/t/", from: first) { recorder.record($0) }
            try await recorder.wait(for: "compaction reported") { $0.contains(.compacted(last)) }
            try await recorder.wait(for: "the watch's threads ended", timeout: .seconds(5)) { _ in
                watchThreads() <= before
            }
            watch.cancel()
        }

        /// The watches' threads of this process (named "etcd-watch" and "etcd-stream").
        func watchThreads() -> Int {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            return tasks.filter { task in
                let name = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
                return name == "etcd-watch\n" || name == "etcd-stream\n"
            }.count
        }

        /// A client shut down has closed its connections: a later call fails at once as unreachable, and a second
        /// shutdown is harmless.
        @Test func shutdownClosesTheClient() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client(timeout: .seconds(2))
            try client.put("/z/k", "1")
            client.shutdown()
            let start = ContinuousClock.now
            #expect {
                try client.put("/z/k", "2")
            } throws: { error in
                if case EtcdError.unreachable = error { true } else { false }
            }
            let elapsed = ContinuousClock.now - start
            print("a call after shutdown failed after \(elapsed)")
            #expect(elapsed < .milliseconds(1_000))
            client.shutdown()
            #expect(try cluster.client().range("/z/k").kvs.first?.value == "1")
        }

        /// A watch whose handler stalls while megabytes of changes arrive (etcd is held back by HTTP/2's flow control
        /// meanwhile) delivers every change, whole and in order, once the handler goes on.
        @Test func stalledWatchHandlerLosesNothing() async throws {
            let cluster = try await EtcdCluster.started()
            defer { cluster.shutdown() }
            let client = cluster.client(timeout: .seconds(3))
            let start = try client.put("/b/start", "0")
            let recorder = WatchRecorder()
            let gate = DispatchSemaphore(value: 0)
            let watch = client.watch(prefix: "/b/", from: start + 1) { update in
                // The first events stall the watch's thread until every put below is done.
                if case .events = update, recorder.events.isEmpty { gate.wait() }
                recorder.record(update)
            }
            defer { watch.cancel() }
            let value = String(repeating: "v", count: 60_000)
            do {
                defer { gate.signal() }
                try await recorder.wait(for: "the watch set up") {
                    $0.contains { if case .connected = $0 { true } else { false } }
                }
                // 40 changes of 60 kB: 2.4 MB, far past HTTP/2's flow-control window (64 KiB a stream).
                for index in 0..<40 { try client.put("/b/k\(index)", "\(index)" + value) }
            }
            let released = ContinuousClock.now
            try await recorder.wait(for: "40 events", timeout: .seconds(20)) { _ in recorder.events.count >= 40 }
            print("stalled watch: 40 changes of 60 kB delivered \(ContinuousClock.now - released) after the release")
            #expect(recorder.events.map(\.kv.key) == (0..<40).map { "/b/k\($0)" })
            #expect(recorder.events.enumerated().allSatisfy { $0.element.kv.value == "\($0.offset)" + value })
        }
    }
}
