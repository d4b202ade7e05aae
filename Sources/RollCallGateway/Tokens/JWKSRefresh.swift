/// When the JWKS is fetched again (docs/websocket.md, Tokens): a value on instants its owner gives, so that tests
/// move the clock themselves.
///
/// - After a good fetch, the next one comes after the response's `Cache-Control: max-age`, clamped to
///   ``minimumInterval`` ... ``maximumInterval`` (``defaultInterval`` without one; `no-cache` or `no-store`: the
///   minimum).
/// - After a failed one (the last good keys stay), retries come after 5 s, 10 s, 20 s, 40 s, then every 60 s.
/// - A token naming a `kid` no key has asks for a fetch now, granted at most once per ``unknownKidInterval``.
public struct JWKSRefresh<Instant: InstantProtocol>: Sendable where Instant.Duration == Duration {
    public static var minimumInterval: Duration { .seconds(60) }
    public static var maximumInterval: Duration { .seconds(3_600) }
    /// Without a `max-age`.
    public static var defaultInterval: Duration { .seconds(300) }
    /// Fetches asked for by unknown `kid`s, at most one per this.
    public static var unknownKidInterval: Duration { .seconds(10) }
    /// The first retry after a failure; each next one waits twice as long, up to ``minimumInterval``.
    public static var firstRetry: Duration { .seconds(5) }

    /// When the next scheduled fetch is due.
    public private(set) var nextFetch: Instant
    /// Failed fetches since the last good one.
    public private(set) var failures = 0
    private var lastUnknownKidFetch: Instant?

    /// A first fetch is due at once.
    public init(now: Instant) {
        nextFetch = now
    }

    /// Whether the scheduled fetch is due.
    public func isDue(at now: Instant) -> Bool { now >= nextFetch }

    /// A fetch succeeded; `maxAge` is its response's `Cache-Control: max-age`, if any.
    public mutating func fetched(at now: Instant, maxAge: Duration?) {
        failures = 0
        let interval = maxAge ?? Self.defaultInterval
        nextFetch = now.advanced(by: min(max(interval, Self.minimumInterval), Self.maximumInterval))
    }

    /// A fetch failed: the next try comes sooner than a refresh would, backing off.
    public mutating func failed(at now: Instant) {
        failures += 1
        let doublings = min(failures - 1, 8)
        nextFetch = now.advanced(by: min(Self.firstRetry * (1 << doublings), Self.minimumInterval))
    }

    /// A token names a `kid` that no key has: whether to fetch now (at most once per ``unknownKidInterval``).
    public mutating func unknownKid(at now: Instant) -> Bool {
        if let last = lastUnknownKidFetch, now < last.advanced(by: Self.unknownKidInterval) { return false }
        lastUnknownKidFetch = now
        return true
    }

    /// The `max-age` of a `Cache-Control` value: `nil` without one, zero for `no-cache` or `no-store`.
    public static func maxAge(cacheControl: String?) -> Duration? {
        guard let cacheControl else { return nil }
        var found: Duration?
        for directive in cacheControl.split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = parts[0].trimmingWhitespace().lowercased()
            if name == "no-cache" || name == "no-store" { return .zero }
            guard name == "max-age", parts.count == 2 else { continue }
            var value = parts[1].trimmingWhitespace()
            if value.hasPrefix("\"") && value.hasSuffix("\"") && value.count >= 2 {
                value = value.dropFirst().dropLast()
            }
            guard let seconds = Int64(value), seconds >= 0 else { continue }
            found = .seconds(seconds)
        }
        return found
    }
}

extension Substring {
    fileprivate func trimmingWhitespace() -> Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return text
    }
}
