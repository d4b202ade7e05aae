/// Capped, jittered exponential backoff: 1 s, 2 s, 4 s ... up to 30 s, each within ±20 %. The one retry policy of
/// the clients: the session machine and the watch machine both wait by it, so that a fleet of phones that lost the
/// same broker does not come back in lockstep.
public struct Backoff: Sendable, Equatable {
    /// Waits drawn since the last ``reset()``.
    public private(set) var attempts = 0
    /// The first wait, before jitter, in milliseconds.
    public var first: Int64 = 1_000
    /// The longest wait, before jitter, in milliseconds.
    public var cap: Int64 = 30_000
    private var random: UInt64

    /// A backoff whose jitter is drawn from `seed`: the same seed gives the same waits, for tests.
    public init(seed: UInt64, first: Int64 = 1_000, cap: Int64 = 30_000) {
        random = seed
        self.first = first
        self.cap = cap
    }

    /// The next wait in milliseconds, and counts it.
    public mutating func next() -> Int64 {
        let base = min(cap, first << min(Int64(attempts), 16))
        attempts += 1
        // SplitMix64: a repeatable jitter from the seed.
        random &+= 0x9E37_79B9_7F4A_7C15
        var z = random
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        let unit = Double(z >> 11) / Double(1 << 53)  // [0, 1)
        return Int64(Double(base) * (0.8 + 0.4 * unit))
    }

    /// The peer answered: the next wait is the first again.
    public mutating func reset() { attempts = 0 }
}
