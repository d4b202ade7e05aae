import RollCallCore
import Testing

@Suite("Several sessions of one user")
struct PrecedenceTests {
    /// The effective status is the most available one: online > busy > away > offline.
    @Test(arguments: [
        ([Status.away, .busy], Status.busy), ([.offline, .away], .away), ([.busy, .online, .away], .online),
        ([.offline, .offline], .offline),
    ])
    func mostAvailableWins(statuses: [Status], expected: Status) {
        var h = Harness()
        for status in statuses { _ = h.open("alice", status: status) }
        #expect(h.record("alice").status == expected)
        #expect(h.record("alice").sessions == statuses.count)
    }

    /// Among equal statuses the text of the most recently changed session wins.
    @Test func latestChangeWinsTies() throws {
        var h = Harness()
        let phone = h.open("alice", status: .away, text: "phone")
        _ = h.open("alice", status: .away, text: "laptop")
        #expect(h.record("alice").text == "laptop")
        _ = h.core.setStatus(session: phone, status: .away, text: "phone again", now: h.now)
        #expect(h.record("alice").text == "phone again")
    }

    /// The user stays available while any session is; the last one leaving makes them offline.
    @Test func availableWhileAnySessionIs() throws {
        var h = Harness()
        let phone = h.open("alice")
        let laptop = h.open("alice", status: .busy, text: "deep work")
        let afterPhone = try #require(h.core.bye(session: phone, now: h.now).updates.first)
        #expect(afterPhone.status == .busy)
        #expect(afterPhone.text == "deep work")
        #expect(afterPhone.sessions == 1)
        #expect(afterPhone.reason == nil)
        let afterLaptop = try #require(h.core.bye(session: laptop, now: h.now).updates.first)
        #expect(afterLaptop.status == .offline)
        #expect(afterLaptop.text == nil)
        #expect(afterLaptop.reason == .bye)
    }

    /// seq grows with every published record, never goes back, and `since` moves only when status or text does.
    @Test func seqGrowsAndSinceTracksStatus() throws {
        var h = Harness()
        _ = h.open("alice")
        let first = h.record("alice")
        h.clock.advance(100)
        _ = h.open("alice")  // a second session: a new record, same status
        let second = h.record("alice")
        #expect(second.seq > first.seq)
        #expect(second.since == first.since)
        #expect(second.sessions == 2)
        // Many changes within one millisecond still each get a larger seq.
        let session = h.open("bob")
        var last = h.record("bob").seq
        for status in [Status.busy, .away, .busy, .away] {
            _ = h.core.setStatus(session: session, status: status, text: nil, now: h.now)
            let seq = h.record("bob").seq
            #expect(seq > last)
            last = seq
        }
    }

    /// seq is never behind the clock in microseconds, so it keeps growing across a restart of an empty core.
    @Test func seqSurvivesARestartWithoutState() {
        var h = Harness()
        _ = h.open("alice")
        for _ in 0..<50 { _ = h.core.bye(session: h.open("alice"), now: h.now) }
        let before = h.record("alice").seq
        var restarted = Harness()
        restarted.clock.now = h.now + 1
        _ = restarted.open("alice")
        #expect(restarted.record("alice").seq > before)
    }

    /// The count of available users follows every change.
    @Test func availableUsersAreCounted() {
        var h = Harness()
        let a = h.open("a")
        _ = h.open("a", status: .away)
        let b = h.open("b", status: .offline)
        #expect(h.core.availableUserCount == 1)
        _ = h.core.setStatus(session: b, status: .busy, text: nil, now: h.now)
        #expect(h.core.availableUserCount == 2)
        _ = h.core.bye(session: a, now: h.now)
        #expect(h.core.availableUserCount == 2)
        h.clock.advance(3_000)
        _ = h.core.tick(now: h.now).records
        #expect(h.core.availableUserCount == 0)
    }

    /// A user never seen reads as offline with no last_seen and seq 0.
    @Test func unknownUser() {
        let h = Harness()
        #expect(h.record("nobody") == .unknown("nobody".id))
        #expect(h.record("nobody").seq == 0)
    }

    /// A query answers every listed user and refuses more than the maximum.
    @Test func queryIsBounded() throws {
        var h = Harness { $0.maxQueryUsers = 3 }
        _ = h.open("alice")
        let records = try h.core.query(["alice".id, "bob".id], now: h.now).get()
        #expect(records.map(\.status) == [.online, .offline])
        // A user named twice is answered once, so the reply never repeats a key.
        #expect(
            try h.core.query(["bob", "alice", "bob"].map(\.id), now: h.now).get().map(\.user.rawValue) == [
                "bob", "alice",
            ])
        #expect(h.core.query(["a", "b", "c", "d"].map(\.id), now: h.now).error?.code == .limit)
    }
}
