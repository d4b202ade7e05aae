import RollCallCore
import Testing

@Suite("Liveness")
struct LivenessTests {
    /// A silent session ends at exactly its TTL: alive one millisecond before, gone at it, reason timeout.
    @Test func expiresAtExactlyTTL() throws {
        var h = Harness()
        _ = h.open("alice")
        #expect(h.core.nextDeadline == h.now + 3_000)
        h.clock.advance(2_999)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        #expect(h.record("alice").status == .online)
        h.clock.advance(1)
        let record = try #require(h.core.tick(now: h.now).records.first)
        #expect(record.status == .offline)
        #expect(record.reason == .timeout)
        #expect(record.lastSeen == h.now)
        #expect(h.core.sessionCount == 0)
        #expect(h.core.nextDeadline == nil)
    }

    /// A heartbeat moves the deadline by a full TTL; so does any other request naming the session.
    @Test func heartbeatsKeepAlive() throws {
        var h = Harness()
        let session = h.open("alice")
        for _ in 0..<10 {
            h.clock.advance(2_000)
            #expect(h.core.heartbeat(session: session, now: h.now).reply.error == nil)
            #expect(h.core.tick(now: h.now).records.isEmpty)
        }
        h.clock.advance(2_000)
        _ = h.core.setStatus(session: session, status: .busy, text: nil, now: h.now)
        h.clock.advance(2_999)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        h.clock.advance(1)
        #expect(h.core.tick(now: h.now).records.first?.status == .offline)
    }

    /// One expiring session of two leaves the user available, with one session fewer.
    @Test func expiryOfOneOfTwoSessions() throws {
        var h = Harness()
        _ = h.open("alice", status: .away)
        h.clock.advance(1_000)
        let laptop = h.open("alice")
        h.clock.advance(2_000)
        _ = h.core.heartbeat(session: laptop, now: h.now)
        let record = try #require(h.core.tick(now: h.now).records.first)
        #expect(record.status == .online)
        #expect(record.sessions == 1)
    }

    /// Many sessions expiring together publish one record per user, in user order.
    @Test func manyExpireInOneTick() {
        var h = Harness()
        for user in ["carol", "alice", "bob"] {
            _ = h.open(user)
            _ = h.open(user)
        }
        h.clock.advance(3_000)
        let records = h.core.tick(now: h.now).records
        #expect(records.map(\.user.rawValue) == ["alice", "bob", "carol"])
        #expect(records.allSatisfy { $0.status == .offline && $0.sessions == 0 })
    }

    /// An ended session's pending check is skipped, and churned sessions do not pile up in the deadlines.
    @Test func endedSessionsDoNotLinger() {
        var h = Harness()
        for _ in 0..<5_000 {
            let (reply, _) = h.hello("alice", ttl: 3_600_000)
            _ = h.core.bye(session: try! reply.get().session, now: h.now)
        }
        _ = h.open("bob")
        // Without the compaction the heap would hold all 5,001 checks for an hour.
        #expect(h.core.expiryCheckCount <= 2 * h.core.sessionCount + 1_024 + 1)
        h.clock.advance(3_000)
        #expect(h.core.tick(now: h.now).records.map(\.user.rawValue) == ["bob"])
    }

    /// Closing a connection ends the sessions that live on it, with reason closed, and no others.
    @Test func connectionClosedEndsItsSessions() throws {
        var h = Harness()
        _ = h.open("alice", connection: 1)
        _ = h.open("bob", connection: 1)
        _ = h.open("bob", connection: 2)
        let records = h.core.connectionClosed(ConnectionID(1), now: h.now).records
        #expect(records.map(\.user.rawValue) == ["alice", "bob"])
        #expect(records[0].status == .offline && records[0].reason == .closed)
        #expect(records[1].status == .online && records[1].sessions == 1)
    }

    /// A session that moved to a newer connection survives the death of its old one (fencing).
    @Test func sessionFollowsItsNewestConnection() throws {
        var h = Harness()
        let session = h.open("alice", connection: 1)
        _ = h.core.heartbeat(session: session, connection: ConnectionID(2), now: h.now)
        #expect(h.core.connectionClosed(ConnectionID(1), now: h.now).records.isEmpty)
        #expect(h.record("alice").status == .online)
        #expect(h.core.connectionClosed(ConnectionID(2), now: h.now).records.first?.status == .offline)
    }
}

@Suite("Connection loss with a grace period")
struct GraceTests {
    /// With a grace period a closed connection publishes nothing at once; the session ends when it runs out,
    /// with reason closed.
    @Test func graceRunsOut() throws {
        var h = Harness { $0.offlineGraceMilliseconds = 500 }
        _ = h.open("alice", connection: 1)
        #expect(h.core.connectionClosed(ConnectionID(1), now: h.now).records.isEmpty)
        #expect(h.core.nextDeadline == h.now + 500)
        h.clock.advance(499)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        h.clock.advance(1)
        let record = try #require(h.core.tick(now: h.now).records.first)
        #expect(record.status == .offline && record.reason == .closed)
    }

    /// A session that comes back over a new connection within the grace period never goes offline, and its
    /// new connection's loss is what counts from then on.
    @Test func comingBackWithinGraceIsSilent() throws {
        var h = Harness { $0.offlineGraceMilliseconds = 500 }
        let session = h.open("alice", connection: 1)
        _ = h.core.connectionClosed(ConnectionID(1), now: h.now).records
        h.clock.advance(300)
        #expect(h.core.heartbeat(session: session, connection: ConnectionID(2), now: h.now).reply.error == nil)
        h.clock.advance(2_000)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        #expect(h.record("alice").status == .online)
        // The TTL still applies, and a later silence ends the session with reason timeout.
        h.clock.advance(1_000)
        #expect(h.core.tick(now: h.now).records.first?.reason == .timeout)
    }

    /// A grace longer than the remaining TTL still ends the session at its TTL, and says closed.
    @Test func graceNeverExtendsTheTTL() throws {
        var h = Harness { $0.offlineGraceMilliseconds = 10_000 }
        _ = h.open("alice", connection: 1)
        h.clock.advance(2_000)
        _ = h.core.connectionClosed(ConnectionID(1), now: h.now).records
        h.clock.advance(1_000)
        #expect(h.core.tick(now: h.now).records.first?.reason == .closed)
    }

    /// Another available session keeps the user online when one connection closes.
    @Test func anotherSessionKeepsTheUserOnline() throws {
        var h = Harness()
        _ = h.open("alice", connection: 1)
        _ = h.open("alice", status: .away, connection: 2)
        let record = try #require(h.core.connectionClosed(ConnectionID(1), now: h.now).records.first)
        #expect(record.status == .away && record.sessions == 1 && record.reason == nil)
    }
}
