import RollCallCore
import Testing

@Suite("Sessions")
struct SessionTests {
    /// A hello makes the user available with one session and publishes the record.
    @Test func helloPublishesOnline() throws {
        var h = Harness()
        let (reply, updates) = h.hello("alice", text: "at my desk")
        let granted = try reply.get()
        #expect(granted.ttlMilliseconds == 3_000)
        #expect(granted.heartbeatMilliseconds == 1_000)
        #expect(updates.count == 1)
        let record = try #require(updates.first)
        #expect(record.user == "alice".id)
        #expect(record.status == .online)
        #expect(record.text == "at my desk")
        #expect(record.sessions == 1)
        #expect(record.since == h.now)
        #expect(record.lastSeen == h.now)
        #expect(record.seq > 0)
        #expect(record.reason == nil)
    }

    /// A requested TTL is clamped to the configured bounds and the heartbeat is a third of a short TTL.
    @Test(arguments: [(500 as Int64, 1_000 as Int64), (2_400, 2_400), (99_999_999, 3_600_000)])
    func ttlIsClamped(requested: Int64, granted: Int64) throws {
        var h = Harness()
        let reply = try h.hello("alice", ttl: requested).0.get()
        #expect(reply.ttlMilliseconds == granted)
        #expect(reply.heartbeatMilliseconds == min(1_000, granted / 3))
    }

    /// A non-positive TTL is a bad request and opens nothing.
    @Test func nonPositiveTTLIsRejected() {
        var h = Harness()
        let (reply, updates) = h.hello("alice", ttl: 0)
        #expect(reply.error?.code == .badRequest)
        #expect(updates.isEmpty)
        #expect(h.core.sessionCount == 0)
    }

    /// A status line of 256 code points is accepted and one of 257 is a bad request that changes nothing.
    @Test func textLengthIsBounded() throws {
        var h = Harness()
        let ok = String(repeating: "é", count: 256)
        let session = try h.hello("alice", text: ok).0.get().session
        let before = h.record("alice")
        let outcome = h.core.setStatus(
            session: session, status: .busy, text: String(repeating: "x", count: 257), now: h.now)
        #expect(outcome.reply.error?.code == .badRequest)
        #expect(outcome.updates.isEmpty)
        #expect(h.record("alice") == before)
        #expect(h.hello("bob", text: String(repeating: "x", count: 257)).0.error?.code == .badRequest)
    }

    /// Heartbeat, status and bye on an unknown session answer unknown_session.
    @Test func unknownSession() {
        var h = Harness()
        let ghost = SessionID("nope")
        #expect(h.core.heartbeat(session: ghost, now: h.now).reply.error?.code == .unknownSession)
        #expect(
            h.core.setStatus(session: ghost, status: .away, text: nil, now: h.now).reply.error?.code == .unknownSession)
        #expect(h.core.bye(session: ghost, now: h.now).reply.error?.code == .unknownSession)
    }

    /// Bye ends the session at once and publishes the user offline with reason bye.
    @Test func byePublishesOffline() throws {
        var h = Harness()
        let session = h.open("alice")
        h.clock.advance(500)
        let outcome = h.core.bye(session: session, now: h.now)
        let record = try #require(outcome.updates.first)
        #expect(record.status == .offline)
        #expect(record.sessions == 0)
        #expect(record.reason == .bye)
        #expect(record.lastSeen == h.now)
        #expect(h.core.heartbeat(session: session, now: h.now).reply.error?.code == .unknownSession)
    }

    /// Setting the same status and text again publishes nothing and keeps seq.
    @Test func unchangedStatusPublishesNothing() throws {
        var h = Harness()
        let session = h.open("alice", text: "hi")
        let seq = h.record("alice").seq
        let outcome = h.core.setStatus(session: session, status: .online, text: "hi", now: h.now)
        #expect(outcome.updates.isEmpty)
        #expect(h.record("alice").seq == seq)
    }

    /// A status without text clears the session's text.
    @Test func statusReplacesText() throws {
        var h = Harness()
        let session = h.open("alice", text: "lunch")
        let outcome = h.core.setStatus(session: session, status: .away, text: nil, now: h.now)
        #expect(outcome.updates.first?.status == .away)
        #expect(outcome.updates.first?.text == nil)
    }

    /// Setting status offline keeps the session but makes the user unavailable, with reason status.
    @Test func offlineStatusKeepsSession() throws {
        var h = Harness()
        let session = h.open("alice")
        h.clock.advance(10)
        let record = try #require(
            h.core.setStatus(session: session, status: .offline, text: nil, now: h.now).updates.first)
        #expect(record.status == .offline)
        #expect(record.sessions == 1)
        #expect(record.reason == .status)
        #expect(record.lastSeen == h.now)
        h.clock.advance(1_000)
        #expect(h.record("alice").lastSeen == h.now + (-1_000))
    }

    /// A user who only ever connected as offline has never been seen available.
    @Test func neverAvailableHasNoLastSeen() {
        var h = Harness()
        _ = h.open("alice", status: .offline)
        #expect(h.record("alice").lastSeen == nil)
        #expect(h.record("alice").sessions == 1)
    }

    /// Session limits per user and in total answer limit and open nothing.
    @Test func sessionLimits() {
        var h = Harness {
            $0.maxSessionsPerUser = 2
            $0.maxSessions = 3
        }
        _ = h.open("alice")
        _ = h.open("alice")
        #expect(h.hello("alice").0.error?.code == .limit)
        #expect(h.record("alice").sessions == 2)
        _ = h.open("bob")
        #expect(h.hello("carol").0.error?.code == .limit)
        #expect(h.core.sessionCount == 3)
    }

    /// A device name over the limit is a bad request.
    @Test func deviceIsBounded() {
        var h = Harness()
        let outcome = h.core.hello(
            .init(user: "alice".id, device: String(repeating: "d", count: 129)), session: SessionID("x"), now: h.now)
        #expect(outcome.reply.error?.code == .badRequest)
        #expect(h.core.sessionCount == 0)
    }
}

@Suite("User ids")
struct UserIDTests {
    /// Valid ids are 1 to 128 bytes of the allowed characters.
    @Test(arguments: ["a", "alice", "A.b_c@d+e-f", "0123", String(repeating: "x", count: 128)])
    func valid(_ text: String) { #expect(UserID(validating: text) != nil) }

    /// Anything else is rejected.
    @Test(arguments: ["", "al ice", "alice/", "ålice", "a*", "a\u{0}", String(repeating: "x", count: 129), "a#b"])
    func invalid(_ text: String) { #expect(UserID(validating: text) == nil) }

    /// A text changed to the same letters in another Unicode form is a change: it is published with the new bytes.
    @Test func textInAnotherUnicodeFormIsAChange() throws {
        var h = Harness()
        let session = h.open("alice", text: "caf\u{E9}")
        let outcome = h.core.setStatus(session: session, status: .online, text: "cafe\u{301}", now: h.now)
        #expect(throws: Never.self) { try outcome.reply.get() }
        let record = try #require(outcome.updates.first)
        #expect(Array(record.text!.utf8) == Array("cafe\u{301}".utf8))
        #expect(Array(h.record("alice").text!.utf8) == Array("cafe\u{301}".utf8))
    }
}
