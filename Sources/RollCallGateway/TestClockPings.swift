/// When the WebSocket door pings in `--test-mode`, where its pings follow the broker's test clock: a round is due
/// each time the clock reaches the next multiple of the interval. A peer must always get a chance to answer one
/// round's ping before the next, which on a clock that jumps it would not: one `advance` may move the clock several
/// times (once per deadline on its way), and a test may send two `advance`s a millisecond apart. So a round that
/// falls due within `answerWindow` of real time after the previous one waits until that window has passed, and rounds
/// that fall due meanwhile are that same round. A live peer on loopback answers in a millisecond or two; a silent one
/// is cut at the second round.
struct TestClockPings {
    enum Action: Equatable {
        case roundNow
        case roundAfter(Duration)
        case nothing
    }

    /// The broker time of the next round.
    private var nextDue: Int64
    private let intervalMilliseconds: Int64
    private let answerWindow: Duration
    private var lastRound: ContinuousClock.Instant?
    private var roundWaiting = false

    init(start: Int64, intervalMilliseconds: Int64, answerWindow: Duration) {
        nextDue = start + intervalMilliseconds
        self.intervalMilliseconds = intervalMilliseconds
        self.answerWindow = answerWindow
    }

    /// The broker's clock moved to `time`, at real time `now`.
    mutating func clockMoved(to time: Int64, now: ContinuousClock.Instant) -> Action {
        guard time >= nextDue else { return .nothing }
        nextDue = time + intervalMilliseconds
        guard !roundWaiting else { return .nothing }
        guard let lastRound, now < lastRound + answerWindow else { return .roundNow }
        roundWaiting = true
        return .roundAfter(lastRound + answerWindow - now)
    }

    /// A round of pings went out at `now`.
    mutating func roundDone(now: ContinuousClock.Instant) {
        lastRound = now
        roundWaiting = false
    }
}
