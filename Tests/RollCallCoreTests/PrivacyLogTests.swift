import RollCallCore
import Testing

/// The presence log read by a viewer (docs/privacy.md): as it would have received it had the user said bye at the
/// moment the viewer lost sight.
@Suite("Privacy: history and query at")
struct PrivacyLogTests {
    /// alice comes online, goes busy, and is hidden from bob (a contact removed) while busy, then keeps changing.
    /// Returns the harness, every transition in the log, and the moment bob lost sight.
    private func aliceHiddenFromBob() throws -> (Harness, [LogEntry], BrokerTime) {
        var h = Harness()
        h.core.startLog(after: 0)
        let alice = h.open("alice")
        _ = try h.core.editContacts("alice".id, .set(["bob".id, "carol".id]), now: h.now).get()
        _ = h.core.setPrivacy("alice".id, visibility: .contacts, lastSeen: nil, now: h.now)
        h.clock.advance(1_000)
        _ = h.core.setStatus(session: alice, status: .busy, text: nil, now: h.now)
        h.clock.advance(1_000)
        let hiddenAt = h.now
        _ = try h.core.editContacts("alice".id, .remove(["bob".id]), now: h.now).get()
        for status in [Status.away, .online] {
            h.clock.advance(1_000)
            _ = h.core.setStatus(session: alice, status: status, text: nil, now: h.now)
        }
        return (h, h.core.takeTransitions(), hiddenAt)
    }

    /// Hidden now: the transitions up to the moment sight was lost, then the bye of the viewer's view at that
    /// moment, with an offset above them; nothing of what came after. The last entry is what `query` answers.
    @Test func aHiddenUsersHistoryEndsWithTheByeOfTheMomentOfHiding() throws {
        let (h, log, hiddenAt) = try aliceHiddenFromBob()
        #expect(log.map(\.record.status) == [.online, .busy, .away, .online])
        let lastSeen = try #require(h.core.lostSight(of: "alice".id, by: "bob".id, now: h.now))
        #expect(lastSeen == log[1].offset)
        let read = h.core.history(log, of: "alice".id, for: "bob".id, lastSeen: log[1], now: h.now)
        #expect(read.map(\.record.status) == [.online, .busy, .offline])
        let bye = try #require(read.last)
        #expect(bye.time == hiddenAt && bye.record.reason == .bye && bye.record.since == hiddenAt)
        #expect(bye.offset > log[1].offset && bye.offset < log[2].offset)
        #expect(bye.record == h.core.view(of: "alice".id, for: "bob".id, now: h.now))
        // A contact and alice herself read everything.
        #expect(h.core.history(log, of: "alice".id, for: "carol".id, lastSeen: nil, now: h.now) == log)
        // A stranger lost sight when the policy was set, while alice was online.
        let stranger = h.core.history(log, of: "alice".id, for: "zoe".id, lastSeen: log[0], now: h.now)
        #expect(stranger.map(\.record.status) == [.online, .offline])
        #expect(h.core.history(log, of: "alice".id, for: "alice".id, lastSeen: nil, now: h.now) == log)
    }

    /// `query` with `at`: before the hiding, the record then; after it, the bye of the moment of hiding, whatever
    /// alice did since.
    @Test func queryAtReadsTheViewAfterTheMomentOfHiding() throws {
        let (h, log, _) = try aliceHiddenFromBob()
        #expect(h.core.recordAt(log[1].record, for: "bob".id, now: h.now) == log[1].record)
        let view = h.core.view(of: "alice".id, for: "bob".id, now: h.now)
        #expect(h.core.recordAt(log[2].record, for: "bob".id, now: h.now) == view)
        #expect(h.core.recordAt(log[3].record, for: "bob".id, now: h.now) == view)
        #expect(h.core.recordAt(.unknown("alice".id), for: "bob".id, now: h.now) == .unknown("alice".id))
    }

    /// A user already offline when sight was lost needs no added bye; one hidden before it was ever published
    /// has no history for the viewer; `last_seen` hidden by the policy is null in every offline entry read.
    @Test func offlineAtHidingUnknownAndLastSeenHidden() throws {
        var h = Harness()
        h.core.startLog(after: 0)
        let alice = h.open("alice")
        h.clock.advance(1_000)
        _ = h.core.bye(session: alice, now: h.now)
        h.clock.advance(1_000)
        _ = h.core.setPrivacy("alice".id, visibility: .nobody, lastSeen: .everyone, now: h.now)
        let log = h.core.takeTransitions()
        #expect(log.map(\.record.status) == [.online, .offline])
        #expect(h.core.history(log, of: "alice".id, for: "bob".id, lastSeen: log[1], now: h.now) == log)

        _ = h.core.setPrivacy("ghost".id, visibility: .nobody, lastSeen: nil, now: h.now)
        let ghost = h.open("ghost")
        _ = h.core.bye(session: ghost, now: h.now)
        let ghostLog = h.core.takeTransitions()
        #expect(ghostLog.count == 2)
        #expect(h.core.history(ghostLog, of: "ghost".id, for: "bob".id, lastSeen: nil, now: h.now).isEmpty)

        _ = h.core.setPrivacy("alice".id, visibility: .everyone, lastSeen: .nobody, now: h.now)
        let read = h.core.history(log, of: "alice".id, for: "bob".id, lastSeen: nil, now: h.now)
        #expect(read[0].record == log[0].record, "an available user's since and last_seen are shown")
        #expect(read[1].record.lastSeen == nil && read[1].record.since == nil && read[1].record.status == .offline)
    }
}
