import Foundation
import RollCallClient
import RollCallCore
import RollCallWebSocketClient
import Synchronization
import Testing

extension Integration {
    /// The Swift watch resumes after a network cut (docs/history.md): through a relay the test cuts, against a real
    /// `rollcall serve` that keeps a presence log.
    @Suite("Swift watch: resume after a network cut")
    struct WebSocketResumeTests {
        /// Bob changes twice while the watcher's network is down; when it is back, the watcher receives both
        /// transitions in order (not only bob's current record), each once, and then the live ones.
        @Test func theTransitionsMissedWhileAwayComeInOrder() async throws {
            let data = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: data) }
            let broker = try AppBroker(testMode: true, ["--data-dir", data])
            let port = try #require(Int(broker.url.split(separator: ":").last?.split(separator: "/").first ?? ""))
            let relay = try TCPRelay(to: port)
            let records = Mutex<[PresenceRecord]>([])
            let ended = Atomic<Int>(0)
            let watch = WebSocketWatch(url: "ws://127.0.0.1:\(relay.port)/v1/ws") { event in
                switch event {
                case .record(let record): records.withLock { $0.append(record) }
                case .disconnected: ended.add(1, ordering: .relaxed)
                default: break
                }
            }
            let operator_ = try broker.client()
            let bob = try operator_.hello(.init(user: "bob".id, ttlMilliseconds: 3_600_000)).session
            watch.follow(.presence("bob".id))
            try await waitFor(seconds: 10) { records.withLock { $0.last?.status } == .online }

            relay.cut()
            try await waitFor(seconds: 10) { ended.load(ordering: .relaxed) >= 1 }
            try operator_.setStatus(bob, .busy)
            try operator_.setStatus(bob, .away)
            _ = try operator_.call(.advance(milliseconds: 200))
            let before = records.withLock { $0.count }
            relay.restore()
            watch.reconnectNow()
            try await waitFor(seconds: 10) { records.withLock { $0.last?.status } == .away }
            let after = records.withLock { Array($0[before...]) }
            #expect(after.map(\.status) == [.busy, .away], "both transitions, in order, once each")
            #expect(after.allSatisfy { $0.offset != nil })

            try operator_.bye(bob)
            try await waitFor(seconds: 10) { records.withLock { $0.last?.status } == .offline }
            #expect(records.withLock { $0.count } == before + 3)
            await watch.close()
        }
    }
}
