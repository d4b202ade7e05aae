import Testing

@testable import RollCallGateway

/// The rounds of pings on the broker's test clock, on a real-time clock the tests move.
@Suite struct TestClockPingsTests {
    static let start = ContinuousClock.now

    /// Nothing is due before the clock reaches the interval; reaching it is one round, and the next is due one
    /// interval after the time reached.
    @Test func aRoundEachInterval() {
        var pings = TestClockPings(start: 1_000, intervalMilliseconds: 100, answerWindow: .milliseconds(50))
        #expect(pings.clockMoved(to: 1_099, now: Self.start) == .nothing)
        #expect(pings.clockMoved(to: 1_100, now: Self.start) == .roundNow)
        #expect(pings.roundDone(now: Self.start) == .nothing)
        #expect(pings.clockMoved(to: 1_199, now: Self.start + .seconds(1)) == .nothing)
        #expect(pings.clockMoved(to: 1_200, now: Self.start + .seconds(1)) == .roundNow)
    }

    /// A move across many intervals is one round, not one per interval.
    @Test func aLongMoveIsOneRound() {
        var pings = TestClockPings(start: 0, intervalMilliseconds: 100, answerWindow: .milliseconds(50))
        #expect(pings.clockMoved(to: 10_000, now: Self.start) == .roundNow)
        #expect(pings.roundDone(now: Self.start) == .nothing)
        #expect(pings.clockMoved(to: 10_099, now: Self.start + .seconds(1)) == .nothing)
    }

    /// A round due within the answer window of the previous one waits for the window's end, and rounds due
    /// meanwhile queue behind it, a window apart: a live peer always has the window to answer.
    @Test func roundsLeaveTheAnswerWindow() {
        var pings = TestClockPings(start: 0, intervalMilliseconds: 100, answerWindow: .milliseconds(50))
        #expect(pings.clockMoved(to: 100, now: Self.start) == .roundNow)
        #expect(pings.roundDone(now: Self.start) == .nothing)
        #expect(pings.clockMoved(to: 200, now: Self.start + .milliseconds(10)) == .roundAfter(.milliseconds(40)))
        #expect(pings.clockMoved(to: 300, now: Self.start + .milliseconds(20)) == .nothing)
        #expect(pings.roundDone(now: Self.start + .milliseconds(50)) == .roundAfter(.milliseconds(50)))
        #expect(pings.roundDone(now: Self.start + .milliseconds(100)) == .nothing)
        #expect(pings.clockMoved(to: 400, now: Self.start + .milliseconds(120)) == .roundAfter(.milliseconds(30)))
        #expect(pings.roundDone(now: Self.start + .milliseconds(150)) == .nothing)
        #expect(pings.clockMoved(to: 500, now: Self.start + .milliseconds(200)) == .roundNow)
    }

    /// Two advances of an interval each, a millisecond apart and just after a round, are two rounds: what cuts a
    /// peer that went silent before them. More than two waiting rounds are two.
    @Test func twoQuickAdvancesAreTwoRounds() {
        var pings = TestClockPings(start: 0, intervalMilliseconds: 100, answerWindow: .milliseconds(50))
        #expect(pings.clockMoved(to: 100, now: Self.start) == .roundNow)
        #expect(pings.roundDone(now: Self.start) == .nothing)
        #expect(pings.clockMoved(to: 200, now: Self.start + .milliseconds(1)) == .roundAfter(.milliseconds(49)))
        #expect(pings.clockMoved(to: 300, now: Self.start + .milliseconds(2)) == .nothing)
        #expect(pings.clockMoved(to: 400, now: Self.start + .milliseconds(3)) == .nothing)
        #expect(pings.clockMoved(to: 500, now: Self.start + .milliseconds(4)) == .nothing)
        var rounds = 0
        var now = Self.start + .milliseconds(50)
        while case .roundAfter(let wait) = pings.roundDone(now: now) {
            rounds += 1
            now += wait
        }
        #expect(rounds == TestClockPings.mostWaiting)
    }
}
