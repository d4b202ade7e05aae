import Foundation
import RollCallClient
import RollCallCore
import Testing

extension Integration {
    @Suite("Liveness over TCP", .serialized)
    struct LivenessTests {
        /// A client that stops heartbeating is published offline at its TTL, with reason timeout.
        @Test func silentClientGoesOfflineAtTTL() async throws {
            try await withBroker({ $0.presence.minTTLMilliseconds = 100 }) { broker in
                let subscriber = try broker.subscriber("dana")
                let client = try broker.client()
                let start = ContinuousClock.now
                let granted = try client.hello(.init(user: "dana".id, ttlMilliseconds: 400))
                #expect(granted.ttlMilliseconds == 400)
                let offline = try subscriber.expect("dana", timeout: 2_000) {
                    $0.status == .offline && $0.sessions == 0
                }
                let elapsed = milliseconds(since: start)
                print("silent client: offline \(Int(elapsed)) ms after hello (ttl 400 ms)")
                #expect(offline.reason == .timeout)
                #expect(elapsed >= 400 && elapsed < 400 + 250)
                do {
                    try client.heartbeat(granted.session)
                    Issue.record("a heartbeat after expiry was accepted")
                } catch ClientError.rejected(let error) {
                    #expect(error.code == .unknownSession)
                }
            }
        }

        /// Heartbeats keep a short-TTL session alive for many TTLs; silence then ends it. On the test-mode clock: each
        /// `advance` answers once everything due has fired and is published.
        @Test func heartbeatsKeepASessionAlive() async throws {
            try await withBroker({
                $0.presence.minTTLMilliseconds = 100
                $0.testMode = true
            }) { broker in
                let subscriber = try broker.subscriber("erin", "marker")
                let client = try broker.client()
                let granted = try client.hello(.init(user: "erin".id, ttlMilliseconds: 300))
                try subscriber.expect("erin") { $0.status == .online }
                for _ in 0..<12 {
                    _ = try client.call(.advance(milliseconds: 100))
                    try client.heartbeat(granted.session)
                }
                // 1.2 s of the broker's clock, four TTLs: nothing of erin before the marker's record.
                _ = try client.hello(.init(user: "marker".id, ttlMilliseconds: 600_000))
                #expect(try subscriber.records(before: "marker").isEmpty)
                _ = try client.call(.advance(milliseconds: 300))
                try subscriber.expect("erin", timeout: 1_000) { $0.status == .offline && $0.reason == .timeout }
            }
        }

        /// PresenceSession heartbeats by itself at the interval the broker asks, and says bye when closed.
        @Test func presenceSessionHeartbeatsByItself() async throws {
            try await withBroker({ $0.presence.minTTLMilliseconds = 100 }) { broker in
                let subscriber = try broker.subscriber("finn")
                let session = try PresenceSession(
                    endpoint: broker.command, hello: .init(user: "finn".id, ttlMilliseconds: 300))
                #expect(session.granted.heartbeatMilliseconds == 100)
                try subscriber.expect("finn") { $0.status == .online }
                #expect(try subscriber.collect(for: 1_000).isEmpty)  // > 3 TTLs without expiring
                session.setStatus(.away, text: "back soon")
                #expect(try subscriber.expect("finn") { $0.status == .away }.text == "back soon")
                session.close()
                #expect(try subscriber.expect("finn") { $0.status == .offline }.reason == .bye)
                #expect(session.lastError == nil)
            }
        }

        /// A `rollcall online` process killed with SIGKILL is published offline, reason closed, at once (no grace
        /// period; tens of milliseconds here, printed): the broker sees its TCP connection close.
        @Test func killedClientProcessGoesOfflineAtOnce() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("gina")
                var delays: [Double] = []
                for _ in 0..<20 {
                    let online = try ChildProcess(
                        ChildProcess.rollcall, ["online", "gina", "--command-endpoint", broker.command])
                    defer { online.terminate() }
                    try subscriber.expect("gina", timeout: 5_000) { $0.status == .online }
                    online.signal(SIGKILL)
                    let killed = ContinuousClock.now
                    let record = try subscriber.expect("gina", timeout: 4_000) { $0.status == .offline }
                    delays.append(milliseconds(since: killed))
                    #expect(record.reason == .closed)
                }
                let sorted = delays.sorted()
                print(
                    "kill -9 of rollcall online, 20 trials: offline after p50 \(String(format: "%.1f", sorted[9])) ms, "
                        + "max \(String(format: "%.1f", sorted[19])) ms")
                // Within a second, below the session's TTL: the close ended it, not the timer (reason `closed`
                // above). The figures are printed, not asserted: this machine is shared and noisy.
                #expect(delays.allSatisfy { $0 < 1_000 })
            }
        }

        /// A frozen client (SIGSTOP: its connection stays open, nothing more arrives) is published offline by its
        /// TTL: within ttl_ms plus one heartbeat interval of the freeze, reason timeout.
        @Test func frozenClientGoesOfflineByTTL() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("hugo")
                let online = try ChildProcess(
                    ChildProcess.rollcall, ["online", "hugo", "--command-endpoint", broker.command])
                defer {
                    online.signal(SIGCONT)
                    online.terminate()
                }
                try subscriber.expect("hugo", timeout: 5_000) { $0.status == .online }
                online.signal(SIGSTOP)
                let frozen = ContinuousClock.now
                let record = try subscriber.expect("hugo", timeout: 5_000) { $0.status == .offline }
                let elapsed = milliseconds(since: frozen)
                print("SIGSTOP of rollcall online: offline after \(Int(elapsed)) ms (ttl 3000 ms, heartbeat 1000 ms)")
                #expect(record.reason == .timeout)
                #expect(elapsed <= 3_000 + 1_000)
            }
        }
    }
}

extension Integration {
    @Suite("Client sessions under refusal")
    struct SessionRefusalTests {
        /// A status the broker refuses (text too long) is dropped and reported; the session stays live and online,
        /// and the next valid status goes through.
        @Test func refusedStatusKeepsTheSession() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("nina")
                let session = try PresenceSession(endpoint: broker.command, hello: .init(user: "nina".id))
                defer { session.close() }
                try subscriber.expect("nina") { $0.status == .online }
                session.setStatus(.busy, text: String(repeating: "x", count: 300))
                try await waitFor { session.lastError != nil }
                #expect(
                    session.lastError.map { if case .refused(let e) = $0 { e.code == .badRequest } else { false } }
                        == true)
                #expect(session.state == .live(session.granted.session))
                session.setStatus(.away, text: "fine")
                // No flap: the next record of nina is that change.
                let next = try subscriber.records(through: { $0.status == .away })
                #expect(next.count == 1 && next.first?.text == "fine", "\(next)")
            }
        }
    }
}
