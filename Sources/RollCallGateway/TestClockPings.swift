/// When the WebSocket door pings in `--test-mode`, where its pings follow the broker's test clock: a round is due
/// each time the clock reaches the next multiple of the interval. A peer must always get a chance to answer one
/// round's ping before the next, which on a clock that jumps it would not: one `advance` may move the clock several
/// times (once per deadline on its way), and a test may send two `advance`s a millisecond apart. So a round that
/// falls due within `answerWindow` of real time after the previous one waits until that window has passed, and
/// rounds that fall due meanwhile queue behind it, each a window after the one before. At most two wait: two rounds
/// are what cuts a silent peer, so a test that advances two intervals after a peer went silent always sees the cut,
/// and a live peer on loopback, which answers in a millisecond or two, never is.
struct TestClockPings {
    enum Action: Equatable {
        case roundNow
        case roundAfter(Duration)
        case nothing
    }

    /// The most rounds that wait behind the one on its way.
    static let mostWaiting = 2

    /// The broker time of the next round.
    private var nextDue: Int64
    private let intervalMilliseconds: Int64
    private let answerWindow: Duration
    private var lastRound: ContinuousClock.Instant?
    /// A round is on its way (`roundNow` or `roundAfter` was returned and ``roundDone(now:)`` not yet called).
    private var roundOnItsWay = false
    /// Rounds that fell due while one was on its way.
    private var waiting = 0

    init(start: Int64, intervalMilliseconds: Int64, answerWindow: Duration) {
        nextDue = start + intervalMilliseconds
        self.intervalMilliseconds = intervalMilliseconds
        self.answerWindow = answerWindow
    }

    /// The broker's clock moved to `time`, at real time `now`.
    mutating func clockMoved(to time: Int64, now: ContinuousClock.Instant) -> Action {
        guard time >= nextDue else { return .nothing }
        nextDue = time + intervalMilliseconds
        guard !roundOnItsWay else {
            waiting = min(waiting + 1, Self.mostWaiting)
            return .nothing
        }
        roundOnItsWay = true
        guard let lastRound, now < lastRound + answerWindow else { return .roundNow }
        return .roundAfter(lastRound + answerWindow - now)
    }

    /// A round of pings went out at `now`: the next one to send, if one waits.
    mutating func roundDone(now: ContinuousClock.Instant) -> Action {
        lastRound = now
        guard waiting > 0 else {
            roundOnItsWay = false
            return .nothing
        }
        waiting -= 1
        return .roundAfter(answerWindow)
    }
}
