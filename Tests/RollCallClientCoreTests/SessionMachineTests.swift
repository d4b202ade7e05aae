import RollCallClientCore
import RollCallCore
import RollCallWire
import Testing

/// A session machine and a clock the test moves by hand, with shorthands for the broker's answers.
struct Driver {
    var machine: SessionMachine
    var now: Int64 = 0
    let hello = PresenceCore.Hello(user: UserID(validating: "alice")!, status: .busy, text: "first")

    init(idleHeartbeats: Bool = true, endpoints: EndpointRotation = EndpointRotation(count: 1)) {
        let granted = PresenceCore.Granted(
            session: SessionID("s1"), heartbeatMilliseconds: 1_000, ttlMilliseconds: 3_000)
        machine = SessionMachine(
            hello: hello, granted: granted, now: 0, seed: 42, idleHeartbeats: idleHeartbeats, endpoints: endpoints)
    }

    /// Moves the clock and asks what to do.
    mutating func next(at time: Int64) -> SessionMachine.Action {
        now = time
        return machine.next(now: now)
    }

    mutating func answer(_ outcome: SessionMachine.Outcome) { machine.completed(outcome, now: now) }

    static func session(_ id: String) -> SessionID { SessionID(id) }
    static let unknown = PresenceError(.unknownSession, "session s1 is unknown or has ended; say hello again")
}

@Suite("Session machine")
struct SessionMachineTests {
    /// Nothing is sent before the heartbeat is due; then a heartbeat goes out, and the next is due one interval
    /// after the answer.
    @Test func heartbeatsAtTheGrantedInterval() {
        var d = Driver()
        #expect(d.next(at: 10) == .sleep(until: 1_000))
        #expect(d.next(at: 1_000) == .send(.heartbeat(session: Driver.session("s1")), reconnectFirst: false))
        d.now = 1_004
        d.answer(.accepted)
        #expect(d.next(at: 1_005) == .sleep(until: 2_004))
        #expect(d.machine.phase == .live(Driver.session("s1")))
    }

    /// A status change goes out at once, not at the next heartbeat; several made meanwhile send only the latest.
    @Test func statusGoesOutAtOnceAndOnlyTheLatest() {
        var d = Driver()
        d.machine.setStatus(.away, text: nil)
        d.machine.setStatus(.online, text: "back")
        #expect(
            d.next(at: 50)
                == .send(.status(session: Driver.session("s1"), status: .online, text: "back"), reconnectFirst: false))
        d.answer(.accepted)
        #expect(!d.machine.statusPending)
        #expect(d.next(at: 60) == .sleep(until: 1_050))
    }

    /// A status change made while a call is under way is not taken as sent by that call's answer.
    @Test func changeDuringACallStaysPending() {
        var d = Driver()
        d.machine.setStatus(.away, text: nil)
        #expect(
            d.next(at: 1)
                == .send(.status(session: Driver.session("s1"), status: .away, text: nil), reconnectFirst: false))
        d.machine.setStatus(.online, text: nil)
        d.answer(.accepted)
        #expect(d.machine.statusPending)
        #expect(
            d.next(at: 2)
                == .send(.status(session: Driver.session("s1"), status: .online, text: nil), reconnectFirst: false))
    }

    /// On unknown_session (the broker restarted) a hello goes out at once, with the status asked for last, and the
    /// session continues under the new id.
    @Test func unknownSessionSaysHelloAgainWithTheLatestStatus() {
        var d = Driver()
        d.machine.setStatus(.away, text: "lunch")
        _ = d.next(at: 1)
        d.answer(.refused(Driver.unknown))
        var expected = d.hello
        (expected.status, expected.text) = (.away, "lunch")
        #expect(d.next(at: 2) == .send(.hello(expected), reconnectFirst: false))
        d.answer(.granted(.init(session: Driver.session("s2"), heartbeatMilliseconds: 500, ttlMilliseconds: 1_500)))
        #expect(d.machine.phase == .live(Driver.session("s2")))
        #expect(!d.machine.statusPending)
        #expect(d.next(at: 3) == .sleep(until: 502))
        #expect(d.next(at: 502) == .send(.heartbeat(session: Driver.session("s2")), reconnectFirst: false))
    }

    /// Unanswered calls back off 1 s, 2 s, 4 s (each within ±20 %), report reconnecting with the attempt, and from
    /// the third failure in a row the connection is dropped before the next try; an answer resets it all.
    @Test func backoffThenRecovery() throws {
        var d = Driver()
        var waits: [Int64] = []
        var reconnects: [Bool] = []
        var at: Int64 = 1_000
        for attempt in 1...4 {
            guard case .send(_, let reconnect) = d.next(at: at) else {
                Issue.record("no call at attempt \(attempt)")
                return
            }
            reconnects.append(reconnect)
            d.answer(.unanswered(reason: "no reply to heartbeat within 3000 ms"))
            #expect(d.machine.phase == .reconnecting(attempt: attempt))
            guard case .sleep(let until) = d.next(at: at) else {
                Issue.record("no wait after attempt \(attempt)")
                return
            }
            waits.append(until - at)
            at = until
        }
        for (index, base) in [1_000, 2_000, 4_000, 8_000].enumerated() {
            #expect(Double(waits[index]) >= Double(base) * 0.8 && Double(waits[index]) <= Double(base) * 1.2)
        }
        #expect(reconnects == [false, false, false, true])
        #expect(d.machine.lastError == .unanswered("no reply to heartbeat within 3000 ms"))
        _ = d.next(at: at)
        d.answer(.accepted)
        #expect(d.machine.phase == .live(Driver.session("s1")))
        #expect(d.next(at: at + 1) == .sleep(until: at + 1_000))
    }

    /// A status change made while the broker does not answer waits for the next attempt, then goes out.
    @Test func statusWaitsForTheBrokerWhileUnreachable() {
        var d = Driver()
        _ = d.next(at: 1_000)
        d.answer(.unanswered(reason: "timeout"))
        d.machine.setStatus(.away, text: nil)
        guard case .sleep(let until) = d.next(at: 1_100) else {
            Issue.record("a status change skipped the backoff")
            return
        }
        #expect(until >= 1_800)
        #expect(
            d.next(at: until)
                == .send(.status(session: Driver.session("s1"), status: .away, text: nil), reconnectFirst: false))
    }

    /// A refused status (too long, say) is dropped, not retried, and the session stays live; a refused hello goes
    /// back to the first hello's status.
    @Test func refusalsAreDroppedNotRetried() {
        var d = Driver()
        d.machine.setStatus(.away, text: String(repeating: "x", count: 300))
        _ = d.next(at: 1)
        d.answer(.refused(PresenceError(.badRequest, "text is longer than 256 characters")))
        #expect(!d.machine.statusPending)
        #expect(d.machine.lastError == .refused(PresenceError(.badRequest, "text is longer than 256 characters")))
        #expect(d.next(at: 2) == .sleep(until: 1_001))

        _ = d.next(at: 1_001)
        d.answer(.refused(Driver.unknown))
        guard case .send(.hello(let hello), _) = d.next(at: 1_002) else {
            Issue.record("no hello after unknown_session")
            return
        }
        #expect(hello.status == .away)
        d.answer(.refused(PresenceError(.badRequest, "text is longer than 256 characters")))
        guard case .send(.hello(let again), _) = d.next(at: 2_002) else {
            Issue.record("no second hello")
            return
        }
        #expect(again.status == .busy && again.text == "first")
    }

    /// Closing says bye while the broker answers, and just stops when it does not.
    @Test func closeSaysByeOnlyWhenReachable() {
        var d = Driver()
        d.machine.close()
        #expect(d.next(at: 5) == .send(.bye(session: Driver.session("s1")), reconnectFirst: false))
        d.answer(.unanswered(reason: "timeout"))
        #expect(d.machine.phase == .closed)
        #expect(d.next(at: 6) == .stop)

        var unreachable = Driver()
        _ = unreachable.next(at: 1_000)
        unreachable.answer(.unanswered(reason: "timeout"))
        unreachable.machine.close()
        #expect(unreachable.next(at: 1_001) == .stop)
        #expect(unreachable.machine.phase == .closed)
    }

    /// A lost connection names the session at once on a fresh connection: a heartbeat that renews it, or, if the
    /// broker has let it go, a hello with the status asked for last.
    @Test func connectionLostRenewsAtOnceOnAFreshConnection() {
        var d = Driver()
        d.now = 200
        d.machine.connectionLost(now: 200)
        #expect(d.next(at: 200) == .send(.heartbeat(session: Driver.session("s1")), reconnectFirst: true))
        d.answer(.accepted)
        #expect(d.machine.phase == .live(Driver.session("s1")))
        #expect(d.next(at: 201) == .sleep(until: 1_200))

        d.machine.setStatus(.away, text: nil)
        d.machine.connectionLost(now: 300)
        #expect(
            d.next(at: 300)
                == .send(.status(session: Driver.session("s1"), status: .away, text: nil), reconnectFirst: true))
        d.answer(.refused(Driver.unknown))
        guard case .send(.hello(let hello), reconnectFirst: false) = d.next(at: 301) else {
            Issue.record("no hello after unknown_session")
            return
        }
        #expect(hello.status == .away)
    }

    /// A session kept alive by its connection sends no heartbeat however long it idles, but still sends a status
    /// change at once and renews after a lost connection.
    @Test func keptByConnectionSendsNoHeartbeats() {
        var d = Driver(idleHeartbeats: false)
        #expect(d.next(at: 1_000_000) == .sleep(until: .max))
        d.machine.setStatus(.busy, text: "call")
        #expect(
            d.next(at: 1_000_001)
                == .send(.status(session: Driver.session("s1"), status: .busy, text: "call"), reconnectFirst: false))
        d.answer(.accepted)
        #expect(d.next(at: 9_000_000) == .sleep(until: .max))
        d.machine.connectionLost(now: 9_000_000)
        #expect(d.next(at: 9_000_000) == .send(.heartbeat(session: Driver.session("s1")), reconnectFirst: true))
        d.answer(.unanswered(reason: "connection refused"))
        guard case .sleep(let until) = d.next(at: 9_000_001) else {
            Issue.record("no backoff after an unanswered renewal")
            return
        }
        #expect(until > 9_000_000 && until <= 9_001_200)
    }
}
