import RollCallCore
import Testing

@Suite("Persistence and restore")
struct PersistenceTests {
    /// Changes name every user whose record changed and every group defined, edited or deleted, once.
    @Test func changesAreCollectedOnce() {
        var h = Harness()
        let a = h.open("a")
        _ = h.open("b")
        _ = h.core.setStatus(session: a, status: .away, text: nil, now: h.now)
        _ = h.define("g", ["a"])
        _ = h.define("gone", ["b"])
        _ = h.core.ungroup("gone".group, now: h.now)
        #expect(h.core.hasChanges)
        let changes = h.core.takeChanges(now: h.now)
        #expect(changes.records.map(\.user.rawValue) == ["a", "b"])
        #expect(changes.records[0].status == .away)
        #expect(changes.groups == [.init(group: "g".group, members: ["a".id], seq: changes.groups[0].seq)])
        #expect(changes.deletedGroups == ["gone".group])
        #expect(!h.core.hasChanges && h.core.takeChanges(now: h.now).isEmpty)
        // Group messages alone are not changes to keep.
        _ = h.core.flushGroups(now: h.now)
        _ = h.core.groupHeader(of: "g".group, now: h.now)
        #expect(!h.core.hasChanges)
    }

    /// Restored users and groups read as before; a user who was available stays available for one TTL.
    @Test func restoreKeepsStateAndAvailability() throws {
        var before = Harness()
        _ = before.open("a", status: .busy, text: "working")
        _ = before.core.bye(session: before.open("b"), now: before.now)
        _ = before.define("g", ["a", "b", "c"])
        let kept = before.core.takeChanges(now: before.now)

        var after = Harness()
        after.clock.now = before.now + 5_000
        after.core.restore(records: kept.records, groups: kept.groups, now: after.now)
        #expect(after.record("a").status == .busy && after.record("a").text == "working")
        #expect(after.record("a").seq > before.record("a").seq)  // re-stamped: see the test below
        var b = after.record("b")
        #expect(b.seq > before.record("b").seq)
        b.seq = before.record("b").seq
        #expect(b == before.core.record(of: "b".id, now: before.now))
        #expect(after.core.snapshot(of: "g".group, now: after.now).counts == StatusCounts(busy: 1, offline: 2))
        #expect(after.core.availableUserCount == 1)
        #expect(after.core.flushGroups(now: after.now).isEmpty)  // restoring publishes nothing
        #expect(after.core.tick(now: after.now).records.isEmpty)
    }

    /// A user who says hello again in time replaces the placeholder without any message; one who does not is
    /// published offline with reason restart when the TTL runs out.
    @Test func placeholdersGiveWayOrExpire() throws {
        var before = Harness()
        _ = before.open("back")
        _ = before.open("gone")
        let kept = before.core.takeChanges(now: before.now)

        var after = Harness()
        after.clock.now = before.now + 1_000
        after.core.restore(records: kept.records, groups: [], now: after.now)
        after.clock.advance(500)
        let (reply, updates) = after.hello("back")
        #expect(try reply.get().session.rawValue.isEmpty == false)
        #expect(updates.isEmpty)  // same status, same session count: nothing to tell anyone
        after.clock.advance(2_500)
        let expired = after.core.tick(now: after.now).records
        #expect(expired.map(\.user.rawValue) == ["gone"])
        #expect(expired.first?.reason == .restart && expired.first?.status == .offline)
        #expect(expired.first!.seq > kept.records.first { $0.user == "gone".id }!.seq)
        #expect(after.record("back").status == .online)
    }

    /// No client can name a placeholder: heartbeat, status and bye on it answer unknown_session.
    @Test func placeholdersCannotBeNamed() {
        var before = Harness()
        _ = before.open("a")
        var after = Harness()
        after.core.restore(records: before.core.takeChanges(now: before.now).records, groups: [], now: after.now)
        let placeholder = SessionID("restored/a")
        #expect(after.core.heartbeat(session: placeholder, now: after.now).reply.error?.code == .unknownSession)
        #expect(after.core.bye(session: placeholder, now: after.now).reply.error?.code == .unknownSession)
        #expect(
            after.core.setStatus(session: placeholder, status: .away, text: nil, now: after.now).reply.error?.code
                == .unknownSession)
    }

    /// Placeholders count for no limit: with the broker full of them, other users and returning users say hello.
    @Test func placeholdersCountForNoLimit() throws {
        var before = Harness()
        _ = before.open("a")
        _ = before.open("b")
        var after = Harness { $0.maxSessions = 2 }
        after.core.restore(records: before.core.takeChanges(now: before.now).records, groups: [], now: after.now)
        after.clock.advance(1_000)
        #expect(after.hello("c").0.error == nil)
        #expect(after.hello("a").0.error == nil)  // takes a's placeholder's place
        #expect(after.hello("d").0.error?.code == .limit)  // c and a hold the two real sessions
        after.clock.advance(2_000)
        #expect(after.core.tick(now: after.now).records.map(\.user.rawValue) == ["b"])  // b never came back
    }

    /// A core that keeps no store notes no changes, so nothing piles up.
    @Test func untrackedChangesDoNotPileUp() {
        var h = Harness()
        h.core.tracksChanges = false
        _ = h.open("a")
        _ = h.define("g", ["a"])
        #expect(!h.core.hasChanges)
    }

    /// A hello refused for a limit leaves the placeholder in place.
    @Test func refusedHelloKeepsThePlaceholder() {
        var before = Harness()
        _ = before.open("a")
        var after = Harness { $0.maxSessions = 1 }
        after.core.restore(records: before.core.takeChanges(now: before.now).records, groups: [], now: after.now)
        #expect(after.hello("a", text: String(repeating: "x", count: 300)).0.error?.code == .badRequest)
        after.clock.advance(3_000)
        #expect(after.core.tick(now: after.now).records.first?.reason == .restart)
    }

    /// A run killed between two batches published changes it never kept; the restored record and group take seqs
    /// above all of them, so no subscriber is ever handed a seq lower than one it saw.
    @Test func restoredSeqsAreAboveWhatTheLastRunIssued() throws {
        var before = Harness()
        let session = before.open("a")
        _ = before.define("g", ["a"])
        let kept = before.core.takeChanges(now: before.now)
        var highest: UInt64 = 0
        for index in 0..<50 {
            before.clock.advance(1)
            let outcome = before.core.setStatus(
                session: session, status: index.isMultiple(of: 2) ? .busy : .away, text: nil, now: before.now)
            highest = max(highest, outcome.updates.map(\.seq).max() ?? 0)
        }
        highest = max(highest, before.core.flushGroups(now: before.now + 1_000).map(\.seq).max() ?? 0)

        var after = Harness()
        after.clock.now = before.now + 1_001  // the restart comes later on the same clock
        after.core.restore(records: kept.records, groups: kept.groups, now: after.now)
        #expect(after.record("a").seq > highest)
        #expect(after.core.snapshot(of: "g".group, now: after.now).seq > highest)
    }
}
