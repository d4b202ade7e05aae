import RollCallCore
import Testing

@Suite("Invisible")
struct InvisibleTests {
    /// Going invisible publishes what a last session going `offline` would: offline, reason `status`, no sessions,
    /// no text; `last_seen` stays at that moment while the invisible session heartbeats on.
    @Test func goingInvisibleLooksLikeGoingOffline() {
        var h = Harness()
        let session = h.open("alice")
        h.clock.advance(1_000)
        let went = h.now
        let updates = h.core.setStatus(session: session, status: .invisible, text: "shh", now: h.now).updates
        #expect(updates.count == 1)
        let record = updates[0]
        #expect(record.status == .offline && record.reason == .status && record.sessions == 0 && record.text == nil)
        #expect(record.lastSeen == went)
        for _ in 0..<5 {
            h.clock.advance(500)
            #expect(h.core.heartbeat(session: session, now: h.now).updates.isEmpty)
        }
        #expect(h.record("alice") == record)
        #expect(h.core.availableUserCount == 0)
        #expect(h.core.visibleSessionCount == 0 && h.core.sessionCount == 1)
    }

    /// A user whose first session is invisible stays exactly as a user never seen: nothing is published, and the
    /// record equals the unknown one. Its ending publishes nothing either.
    @Test func invisibleFromTheStartIsNeverSeen() {
        var h = Harness()
        let (reply, updates) = h.hello("ghost", status: .invisible)
        #expect(updates.isEmpty)
        #expect(h.record("ghost") == .unknown("ghost".id))
        let session = try! reply.get().session
        #expect(h.core.bye(session: session, now: h.now).updates.isEmpty)
        #expect(h.record("ghost") == .unknown("ghost".id))
    }

    /// An invisible session beside a visible one changes nothing others see (the count included); the truth
    /// counts both, and shows `invisible` only when no visible session is available.
    @Test func anotherVisibleSessionStillShows() {
        var h = Harness()
        let phone = h.open("bob", status: .away)
        let (_, updates) = h.hello("bob", status: .invisible)
        #expect(updates.isEmpty)
        #expect(h.record("bob").status == .away && h.record("bob").sessions == 1)
        #expect(h.core.trueRecord(of: "bob".id, now: h.now).sessions == 2)
        #expect(h.core.trueRecord(of: "bob".id, now: h.now).status == .away)
        _ = h.core.bye(session: phone, now: h.now)
        #expect(h.record("bob").status == .offline)
        #expect(h.core.trueRecord(of: "bob".id, now: h.now).status == .invisible)
    }

    /// Groups count an invisible member offline, and their messages and counts never name the status.
    @Test func groupsCountInvisibleOffline() {
        var h = Harness()
        _ = h.core.group("g".group, GroupEdit(members: ["a".id, "b".id]), after: nil, limit: 10, now: h.now)
        let a = h.open("a")
        _ = h.open("b")
        _ = h.core.flushGroups(now: h.now + 1_000)
        h.clock.advance(1_000)
        _ = h.core.setStatus(session: a, status: .invisible, text: nil, now: h.now)
        let flushed = h.core.flushGroups(now: h.now + 1_000)
        #expect(flushed.last?.counts.available == 1)
        #expect(flushed.last?.counts.offline == 1)
        #expect(flushed.last?.changed.map(\.status) == [.offline])
    }

    /// `query` answers the truth only for the users `seesTruth` names.
    @Test func queryTellsTheTruthOnlyWhereAllowed() throws {
        var h = Harness()
        _ = h.open("alice", status: .invisible)
        let public_ = try h.core.query(["alice".id], now: h.now).get()
        let own = try h.core.query(["alice".id], now: h.now, seesTruth: { $0 == "alice".id }).get()
        #expect(public_[0].status == .offline)
        #expect(own[0].status == .invisible && own[0].sessions == 1)
    }
}
