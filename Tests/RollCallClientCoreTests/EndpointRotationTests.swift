import RollCallClientCore
import RollCallCore
import RollCallWire
import Testing

@Suite("Endpoint rotation")
struct EndpointRotationTests {
    /// Each failure moves to the next endpoint, wrapping around; it is tried at once until every endpoint has failed
    /// in a row, and then only after the backoff.
    @Test func movesOnAtOnceUntilAWholeRoundFailed() {
        var rotation = EndpointRotation(count: 3, current: 1)
        var moves: [(Int, Bool)] = []
        for _ in 0..<7 {
            let atOnce = rotation.failed()
            moves.append((rotation.current, atOnce))
        }
        #expect(moves.map(\.0) == [2, 0, 1, 2, 0, 1, 2])
        #expect(moves.map(\.1) == [true, true, false, true, true, false, true])
        #expect(rotation.failures == 7)
    }

    /// An answer starts a new round: the endpoint that answered is kept, and the next failure moves on at once.
    @Test func anAnswerStartsANewRound() {
        var rotation = EndpointRotation(count: 2)
        let first = rotation.failed()
        rotation.answered()
        #expect(first && rotation.current == 1 && rotation.failures == 0)
        let second = rotation.failed()
        #expect(second && rotation.current == 0)
        let third = rotation.failed()
        #expect(!third && rotation.current == 1)
    }

    /// With one endpoint nothing rotates and every failure waits for the backoff.
    @Test func oneEndpointAlwaysBacksOff() {
        var rotation = EndpointRotation(count: 1)
        #expect(!rotation.rotates)
        let moves = [rotation.failed(), rotation.failed()]
        #expect(moves == [false, false])
        #expect(rotation.current == 0 && rotation.failures == 2)
    }
}

@Suite("Session machine over several endpoints")
struct SessionFailoverTests {
    static let timeout = SessionMachine.Outcome.unanswered(reason: "no reply to heartbeat within 3000 ms")

    /// The hello a session says on another node: the first hello with the status asked for last.
    static func hello(_ d: Driver, status: Status, text: String?) -> Request {
        var hello = d.hello
        (hello.status, hello.text) = (status, text)
        return .hello(hello)
    }

    /// An unanswered heartbeat moves the session at once to the next endpoint, on a fresh connection, with a hello
    /// carrying the status asked for last; the grant there makes it live under the new session id.
    @Test func unansweredCallMovesToTheNextEndpointAndSaysHello() {
        var d = Driver(endpoints: EndpointRotation(count: 2))
        #expect(d.machine.endpoint == 0)
        _ = d.next(at: 1_000)
        d.machine.setStatus(.away, text: "lunch")
        d.answer(Self.timeout)
        #expect(d.machine.endpoint == 1)
        #expect(d.machine.phase == .reconnecting(attempt: 1))
        #expect(d.next(at: 4_000) == .send(Self.hello(d, status: .away, text: "lunch"), reconnectFirst: true))
        d.answer(.granted(.init(session: Driver.session("b1"), heartbeatMilliseconds: 1_000, ttlMilliseconds: 3_000)))
        #expect(d.machine.phase == .live(Driver.session("b1")))
        #expect(!d.machine.statusPending)
        #expect(d.next(at: 4_001) == .sleep(until: 5_000))
        #expect(d.next(at: 5_000) == .send(.heartbeat(session: Driver.session("b1")), reconnectFirst: false))
    }

    /// A lost connection with several endpoints moves on at once with a hello, instead of renewing the session on
    /// the endpoint whose connection ended.
    @Test func lostConnectionMovesOn() {
        var d = Driver(endpoints: EndpointRotation(count: 3))
        d.now = 300
        d.machine.connectionLost(now: 300)
        #expect(d.machine.endpoint == 1)
        #expect(d.machine.lastError == .unanswered("the connection to the broker ended"))
        #expect(d.next(at: 300) == .send(Self.hello(d, status: .busy, text: "first"), reconnectFirst: true))
    }

    /// When every endpoint fails in a row the next attempt waits for the backoff (1 s, then 2 s, within ±20 %), and
    /// the endpoints keep turning; each attempt is a hello on a fresh connection.
    @Test func aWholeRoundFailedWaitsForTheBackoff() {
        var d = Driver(endpoints: EndpointRotation(count: 2))
        _ = d.next(at: 1_000)
        d.answer(Self.timeout)  // endpoint 0 failed: to 1 at once
        #expect(d.next(at: 4_000) == .send(Self.hello(d, status: .busy, text: "first"), reconnectFirst: true))
        d.now = 7_000
        d.answer(.unanswered(reason: "no reply to hello within 3000 ms"))  // both failed: back to 0 after 1 s
        #expect(d.machine.endpoint == 0)
        #expect(d.machine.phase == .reconnecting(attempt: 2))
        guard case .sleep(let until) = d.next(at: 7_000) else {
            Issue.record("no backoff after a whole round failed")
            return
        }
        #expect(until >= 7_800 && until <= 8_200)
        #expect(d.next(at: until) == .send(Self.hello(d, status: .busy, text: "first"), reconnectFirst: true))
        d.answer(.unanswered(reason: "connection refused"))  // endpoint 0 again: to 1 at once
        #expect(d.machine.endpoint == 1)
        #expect(d.next(at: until) == .send(Self.hello(d, status: .busy, text: "first"), reconnectFirst: true))
        d.now = until + 10
        d.answer(.unanswered(reason: "connection refused"))  // the second round failed: 2 s
        guard case .sleep(let second) = d.next(at: until + 10) else {
            Issue.record("no backoff after the second round")
            return
        }
        #expect(second - (until + 10) >= 1_600 && second - (until + 10) <= 2_400)
    }

    /// Closing while moving between endpoints just stops: there is no session to say bye to on the next one.
    @Test func closingWhileMovingStops() {
        var d = Driver(endpoints: EndpointRotation(count: 2))
        _ = d.next(at: 1_000)
        d.answer(Self.timeout)
        d.machine.close()
        #expect(d.next(at: 1_001) == .stop)
        #expect(d.machine.phase == .closed)
    }

    /// An answered call on the endpoint in use keeps the session there; a refusal (not a failure of the node) does
    /// not move it.
    @Test func refusalsAndUnknownSessionStayOnTheEndpoint() {
        var d = Driver(endpoints: EndpointRotation(count: 2, current: 1))
        _ = d.next(at: 1_000)
        d.answer(.refused(Driver.unknown))
        #expect(d.machine.endpoint == 1)
        #expect(d.next(at: 1_000) == .send(Self.hello(d, status: .busy, text: "first"), reconnectFirst: false))
        d.answer(.refused(PresenceError(.limit, "too many sessions")))
        #expect(d.machine.endpoint == 1)
        #expect(d.machine.phase == .live(Driver.session("s1")))
    }
}
