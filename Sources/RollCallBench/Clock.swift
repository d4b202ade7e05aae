import Foundation

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the machine.
func monotonicNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

/// Waits until `current()` reaches `count`, or has not moved for `quiet`; returns it then.
func waitForCount(_ count: Int, quiet: Duration, _ current: () -> Int) -> Int {
    var last = current()
    var lastChange = ContinuousClock.now
    while last < count {
        Thread.sleep(forTimeInterval: 0.005)
        let now = current()
        if now != last {
            (last, lastChange) = (now, ContinuousClock.now)
        } else if ContinuousClock.now - lastChange > quiet {
            break
        }
    }
    return last
}

/// `count` a second from `start` to `end` (monotonic nanoseconds); an end not after the start counts as 1 ns.
func perSecond(_ count: Int, from start: UInt64, to end: UInt64) -> Double {
    Double(count) / (Double(end > start ? end - start : 1) / 1e9)
}
