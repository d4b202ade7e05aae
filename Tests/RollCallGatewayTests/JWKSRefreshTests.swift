import Testing

@testable import RollCallGateway

/// When the JWKS is fetched again, on a clock the tests move.
@Suite struct JWKSRefreshTests {
    typealias Refresh = JWKSRefresh<ContinuousClock.Instant>
    static let start = ContinuousClock.now

    /// The first fetch is due at once; after a good one, the next is due after the response's max-age.
    @Test func aFetchThenMaxAge() {
        var refresh = Refresh(now: Self.start)
        #expect(refresh.isDue(at: Self.start))
        refresh.fetched(at: Self.start, maxAge: .seconds(600))
        #expect(!refresh.isDue(at: Self.start + .seconds(599)))
        #expect(refresh.isDue(at: Self.start + .seconds(600)))
    }

    /// The max-age is clamped to 60 s ... 3,600 s; without one the interval is 300 s.
    @Test(
        arguments: [(0, 60), (5, 60), (60, 60), (61, 61), (3_600, 3_600), (86_400, 3_600), (nil, 300)] as [(Int?, Int)])
    func maxAgeIsClamped(maxAge: Int?, interval: Int) {
        var refresh = Refresh(now: Self.start)
        refresh.fetched(at: Self.start, maxAge: maxAge.map { .seconds($0) })
        #expect(refresh.nextFetch == Self.start + .seconds(interval))
    }

    /// Failed fetches are retried after 5 s, 10 s, 20 s, 40 s, then every 60 s; a good fetch ends the backoff.
    @Test func failuresBackOffToAMinute() {
        var refresh = Refresh(now: Self.start)
        var now = Self.start
        var waits: [Duration] = []
        for _ in 0..<7 {
            refresh.failed(at: now)
            waits.append(refresh.nextFetch - now)
            #expect(!refresh.isDue(at: now))
            now = refresh.nextFetch
            #expect(refresh.isDue(at: now))
        }
        #expect(waits == [5, 10, 20, 40, 60, 60, 60].map { .seconds($0) })
        #expect(refresh.failures == 7)
        refresh.fetched(at: now, maxAge: .seconds(120))
        #expect(refresh.failures == 0)
        refresh.failed(at: now)
        #expect(refresh.nextFetch == now + .seconds(5))
    }

    /// Unknown `kid`s ask for a fetch at most once per 10 s.
    @Test func unknownKidsAreRateLimited() {
        var refresh = Refresh(now: Self.start)
        let offsets: [Duration] = [.zero, .zero, .milliseconds(9_999), .seconds(10), .seconds(15), .seconds(20)]
        let granted = offsets.map { refresh.unknownKid(at: Self.start + $0) }
        #expect(granted == [true, false, false, true, false, true])
    }

    /// `Cache-Control` read for its max-age: among other directives, quoted, in any case; `no-cache` and
    /// `no-store` are zero (the shortest interval); anything else is no max-age.
    @Test(
        arguments: [
            ("max-age=600", 600), ("public, max-age=19302, must-revalidate, no-transform", 19_302),
            ("Max-Age = 30", 30), ("MAX-AGE=30", 30), ("max-age=\"45\"", 45), ("no-cache", 0),
            ("private, no-store", 0), ("s-maxage=10", nil), ("max-age=abc", nil), ("max-age=-5", nil), ("", nil),
            ("=", nil), (",,", nil),
        ] as [(String, Int?)])
    func cacheControl(value: String, seconds: Int?) {
        #expect(Refresh.maxAge(cacheControl: value) == seconds.map { .seconds($0) }, "\(value)")
    }

    /// No header, no max-age.
    @Test func noCacheControl() {
        #expect(Refresh.maxAge(cacheControl: nil) == nil)
    }
}
