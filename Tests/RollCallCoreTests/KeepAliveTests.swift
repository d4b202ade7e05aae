import RollCallCore
import Testing

@Suite("Kept alive by the connection")
struct KeepAliveTests {
    /// Opens a session kept alive by connection 7 and returns its id.
    private func openKept(_ h: inout Harness, _ user: String, connection: UInt64? = 7) -> SessionID {
        h.nextSession += 1
        let outcome = h.core.hello(
            .init(user: user.id, keepAlive: .connection), session: SessionID("k\(h.nextSession)"),
            connection: connection.map(ConnectionID.init), now: h.now)
        return try! outcome.reply.get().session
    }

    /// A session kept alive by its connection outlives its TTL many times over without a single request.
    @Test func noTTLExpiryWhileAttached() {
        var h = Harness()
        _ = openKept(&h, "alice")
        for _ in 0..<100 {
            h.clock.advance(3_000)
            #expect(h.core.tick(now: h.now).records.isEmpty)
        }
        print("silent for \(100 * 3_000) ms with a TTL of 3000 ms: still \(h.record("alice").status)")
        #expect(h.record("alice").status == .online)
        #expect(h.core.sessionCount == 1)
    }

    /// Its connection's close ends it at once with reason closed, as for any other session.
    @Test func endsWhenConnectionCloses() throws {
        var h = Harness()
        _ = openKept(&h, "alice")
        h.clock.advance(10_000)
        _ = h.core.tick(now: h.now)
        let actions = h.core.connectionClosed(ConnectionID(7), now: h.now)
        guard case .publish(let record) = try #require(actions.first) else {
            Issue.record("expected a record")
            return
        }
        #expect(record.status == .offline)
        #expect(record.reason == .closed)
        #expect(h.core.sessionCount == 0)
    }

    /// With a grace period, a closed connection leaves it the grace period and no more, even if its TTL is longer.
    @Test func endsAfterGraceOnceDetached() throws {
        var h = Harness { $0.offlineGraceMilliseconds = 500 }
        _ = openKept(&h, "alice")
        h.clock.advance(4_000)
        _ = h.core.tick(now: h.now)
        #expect(h.core.connectionClosed(ConnectionID(7), now: h.now).isEmpty)
        h.clock.advance(499)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        h.clock.advance(1)
        let record = try #require(h.core.tick(now: h.now).records.first)
        #expect(record.status == .offline)
        #expect(record.reason == .closed)
    }

    /// Over a transport the broker cannot track (no connection), the TTL applies as usual.
    @Test func untrackedFallsBackToTTL() throws {
        var h = Harness()
        _ = openKept(&h, "alice", connection: nil)
        h.clock.advance(3_000)
        let record = try #require(h.core.tick(now: h.now).records.first)
        #expect(record.reason == .timeout)
    }

    /// `bye` ends it at once.
    @Test func byeEndsIt() {
        var h = Harness()
        let session = openKept(&h, "alice")
        h.clock.advance(9_000)
        _ = h.core.tick(now: h.now)
        #expect(h.core.bye(session: session, now: h.now).updates.first?.reason == .bye)
    }
}
