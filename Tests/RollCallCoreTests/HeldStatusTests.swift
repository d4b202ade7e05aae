import RollCallCore
import Testing

@Suite("Held status changes (after_ms)")
struct HeldStatusTests {
    /// A held change publishes nothing when asked, and publishes the new record exactly when it comes due.
    @Test func heldChangeTakesEffectWhenDue() throws {
        var h = Harness { $0.defaultTTLMilliseconds = 60_000 }
        let session = h.open("alice")
        let before = h.record("alice")
        let outcome = h.core.holdStatus(session: session, status: .offline, text: nil, after: 5_000, now: h.now)
        #expect(try outcome.reply.get() == true)
        #expect(outcome.updates.isEmpty)
        #expect(h.core.nextDeadline == h.now + 5_000)
        h.clock.advance(4_999)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        #expect(h.record("alice").seq == before.seq)
        h.clock.advance(1)
        let records = h.core.tick(now: h.now).records
        let record = try #require(records.first)
        #expect(records.count == 1)
        #expect(record.status == .offline)
        #expect(record.sessions == 1)
        #expect(record.reason == .status)
        #expect(record.since == h.now)
        #expect(record.seq > before.seq)
    }

    /// Setting the status back to what the session has cancels the held change: nothing is ever published, and the
    /// record keeps its seq and since.
    @Test func statusBackCancelsWithoutPublishing() throws {
        var h = Harness { $0.defaultTTLMilliseconds = 60_000 }
        let session = h.open("alice")
        let before = h.record("alice")
        _ = h.core.holdStatus(session: session, status: .away, text: "brb", after: 5_000, now: h.now)
        h.clock.advance(2_000)
        let back = h.core.setStatus(session: session, status: .online, text: nil, now: h.now)
        #expect(back.updates.isEmpty)
        h.clock.advance(10_000)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        let after = h.record("alice")
        #expect(after.status == .online)
        #expect(after.seq == before.seq)
        #expect(after.since == before.since)
    }

    /// A held change that asks for what the session already has holds nothing and cancels an earlier hold.
    @Test func holdingTheCurrentStatusCancels() throws {
        var h = Harness { $0.defaultTTLMilliseconds = 60_000 }
        let session = h.open("alice")
        _ = h.core.holdStatus(session: session, status: .offline, text: nil, after: 5_000, now: h.now)
        let same = h.core.holdStatus(session: session, status: .online, text: nil, after: 3_000, now: h.now)
        #expect(try same.reply.get() == false)
        h.clock.advance(6_000)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        #expect(h.record("alice").status == .online)
    }

    /// A later held change replaces an earlier one: only the later one takes effect, at its own time.
    @Test func laterHoldReplacesEarlier() throws {
        var h = Harness { $0.defaultTTLMilliseconds = 60_000 }
        let session = h.open("alice")
        _ = h.core.holdStatus(session: session, status: .offline, text: nil, after: 5_000, now: h.now)
        h.clock.advance(1_000)
        _ = h.core.holdStatus(session: session, status: .away, text: "lunch", after: 10_000, now: h.now)
        h.clock.advance(4_000)  // the first hold's time
        #expect(h.core.tick(now: h.now).records.isEmpty)
        h.clock.advance(6_000)
        let records = h.core.tick(now: h.now).records
        #expect(records.map(\.status) == [.away])
        #expect(records.first?.text == "lunch")
    }

    /// An immediate status replaces a held one: it is published at once and the held change never comes.
    @Test func immediateStatusReplacesHold() throws {
        var h = Harness { $0.defaultTTLMilliseconds = 60_000 }
        let session = h.open("alice")
        _ = h.core.holdStatus(session: session, status: .offline, text: nil, after: 5_000, now: h.now)
        let busy = h.core.setStatus(session: session, status: .busy, text: nil, now: h.now)
        #expect(busy.updates.map(\.status) == [.busy])
        h.clock.advance(5_000)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        #expect(h.record("alice").status == .busy)
    }

    /// Heartbeats renew the session but do not cancel a held change.
    @Test func heartbeatsDoNotCancel() throws {
        var h = Harness()
        let session = h.open("alice")
        _ = h.core.holdStatus(session: session, status: .offline, text: nil, after: 5_000, now: h.now)
        for _ in 0..<5 {
            h.clock.advance(1_000)
            #expect(h.core.heartbeat(session: session, now: h.now).reply.error == nil)
            _ = h.core.tick(now: h.now)
        }
        #expect(h.record("alice").status == .offline)
        #expect(h.record("alice").sessions == 1)
    }

    /// A session that ends before its held change comes due ends as usual, and the change is dropped.
    @Test func endedSessionDropsItsHold() throws {
        var h = Harness { $0.defaultTTLMilliseconds = 60_000 }
        let session = h.open("alice")
        _ = h.core.holdStatus(session: session, status: .away, text: nil, after: 5_000, now: h.now)
        h.clock.advance(1_000)
        let bye = h.core.bye(session: session, now: h.now)
        #expect(bye.updates.map(\.reason) == [.bye])
        let again = h.open("alice")
        h.clock.advance(10_000)
        #expect(h.core.tick(now: h.now).records.isEmpty)
        #expect(h.record("alice").status == .online)
        #expect(h.core.heartbeat(session: again, now: h.now).reply.error == nil)
    }

    /// A session that falls silent while it holds a change ends by its TTL; the change does not outlive it.
    @Test func holdLongerThanTTLEndsByTimeout() throws {
        var h = Harness()  // TTL 3 s
        let session = h.open("alice")
        _ = h.core.holdStatus(session: session, status: .away, text: nil, after: 10_000, now: h.now)
        h.clock.advance(3_000)
        let records = h.core.tick(now: h.now).records
        #expect(records.map(\.reason) == [.timeout])
        h.clock.advance(10_000)
        #expect(h.core.tick(now: h.now).records.isEmpty)
    }

    /// after_ms outside 1 to 600,000, a text too long or an unknown session is refused and holds nothing.
    @Test(arguments: [0 as Int64, -1, 600_001])
    func outOfRangeIsRefused(after: Int64) {
        var h = Harness()
        let session = h.open("alice")
        let outcome = h.core.holdStatus(session: session, status: .away, text: nil, after: after, now: h.now)
        #expect(outcome.reply.error?.code == .badRequest)
        #expect(h.core.nextDeadline == h.now + 3_000)  // only the session's own expiry
    }

    /// Refusals of a held change: a too long text, an unknown session.
    @Test func badHoldsAreRefused() {
        var h = Harness()
        let session = h.open("alice")
        let long = h.core.holdStatus(
            session: session, status: .away, text: String(repeating: "x", count: 257), after: 5, now: h.now)
        #expect(long.reply.error?.code == .badRequest)
        let ghost = h.core.holdStatus(session: SessionID("nope"), status: .away, text: nil, after: 5, now: h.now)
        #expect(ghost.reply.error?.code == .unknownSession)
        h.clock.advance(5)
        #expect(h.core.tick(now: h.now).records.isEmpty)
    }

    /// A client re-holding a change in a loop leaves a bounded number of entries behind.
    @Test func reHoldingIsBounded() {
        var h = Harness { $0.defaultTTLMilliseconds = 3_600_000 }
        let session = h.open("alice")
        for index in 0..<10_000 {
            let status: Status = index % 2 == 0 ? .away : .busy
            _ = h.core.holdStatus(session: session, status: status, text: nil, after: 600_000, now: h.now)
        }
        #expect(h.core.heldChangeCount <= 2 * h.core.sessionCount + 1_025)
        h.clock.advance(600_000)
        #expect(h.core.tick(now: h.now).records.map(\.status) == [.busy])
    }
}
