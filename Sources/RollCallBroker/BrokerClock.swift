import RollCallCore

#if canImport(Glibc)
    import Glibc
#endif

/// The broker's clock: wall-clock time read once at start, then advanced by the monotonic clock, so it reads as
/// milliseconds since the Unix epoch and never goes back while the broker runs, whatever happens to the wall clock.
/// In test mode it is a manual clock instead: it starts at the same time and moves only when told (`advance`).
struct BrokerClock: Sendable {
    private let wallAtStart: Int64
    private let monotonicAtStart: Int64
    /// The time of a manual clock; `nil` for the real one.
    private var manual: BrokerTime?
    /// Told of every move of a manual clock (the WebSocket door's pings follow it).
    var signal: TestClockSignal?

    /// Starts at the wall clock, or just above `floor` (the last time a previous run kept) if the wall clock is
    /// behind it, so that times and seqs never go back across restarts.
    init(floor: BrokerTime? = nil, manual: Bool = false) {
        wallAtStart = max(Self.read(CLOCK_REALTIME), (floor?.milliseconds ?? 0) + 1)
        monotonicAtStart = Self.read(CLOCK_MONOTONIC)
        self.manual = manual ? BrokerTime(milliseconds: wallAtStart) : nil
    }

    /// Whether only ``move(to:)`` moves it.
    var isManual: Bool { manual != nil }

    func now() -> BrokerTime {
        manual ?? BrokerTime(milliseconds: wallAtStart + (Self.read(CLOCK_MONOTONIC) - monotonicAtStart))
    }

    /// Moves a manual clock forward to `time`; it never goes back.
    mutating func move(to time: BrokerTime) {
        precondition(isManual, "only a manual clock is moved by hand")
        manual = max(manual!, time)
        signal?.moved(to: manual!)
    }

    private static func read(_ clock: clockid_t) -> Int64 {
        var spec = timespec()
        clock_gettime(clock, &spec)
        return Int64(spec.tv_sec) * 1_000 + Int64(spec.tv_nsec) / 1_000_000
    }
}

/// Unguessable tokens for sessions and epochs.
enum Token {
    /// `bits` random bits as lowercase hex.
    static func random(bits: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        var text = ""
        for _ in 0..<(bits + 63) / 64 {
            let word = String(generator.next() as UInt64, radix: 16)
            text += String(repeating: "0", count: 16 - word.count) + word
        }
        return String(text.prefix(bits / 4))
    }
}
