import Synchronization

/// When the loop last finished a round, for health checks from other threads.
final class LoopHeartbeat: Sendable {
    private let lastRound = Atomic<Int64>(0)
    private let start = ContinuousClock.now

    /// Milliseconds on a monotonic clock.
    var now: Int64 {
        let elapsed = ContinuousClock.now - start
        return elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000
    }

    func beat() { lastRound.store(now, ordering: .relaxed) }

    /// Milliseconds since the loop last finished a round; `nil` before its first.
    var sinceLastRound: Int64? {
        let last = lastRound.load(ordering: .relaxed)
        return last == 0 ? nil : now - last
    }
}
