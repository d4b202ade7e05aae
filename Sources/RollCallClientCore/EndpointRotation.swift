/// Which of several command endpoints (nodes of a cluster, or brokers that stand in for each other) a session uses,
/// and whether moving to the next one waits for the backoff: a value told of failures and answers, with no sockets.
///
/// The session stays on the endpoint that answers. When the endpoint fails it (no answer within the deadline, the
/// connection ended, or the node said it cannot take sessions now), the session moves to the next one in the list,
/// at once while some endpoint has not failed since the last answer. Once every endpoint has failed in a row, a whole
/// round has, and the next attempt waits for the backoff. With one endpoint every failure waits for the backoff, as
/// a single-broker session always did.
public struct EndpointRotation: Sendable, Equatable {
    /// How many endpoints there are.
    public let count: Int
    /// The index of the endpoint in use, or to try next.
    public private(set) var current: Int
    /// Failures in a row since an endpoint last answered.
    public private(set) var failures = 0

    /// A rotation over `count` endpoints that begins at index `current`.
    public init(count: Int, current: Int = 0) {
        precondition(count >= 1, "at least one endpoint")
        precondition((0..<count).contains(current), "the first endpoint must be one of them")
        self.count = count
        self.current = current
    }

    /// Whether a failure moves the session to another endpoint.
    public var rotates: Bool { count > 1 }

    /// The endpoint in use failed: move to the next. Answers whether to try it at once (`true`: it has not failed
    /// since the last answer) or after the backoff (`false`: every endpoint has now failed in a row).
    public mutating func failed() -> Bool {
        failures += 1
        current = (current + 1) % count
        return !failures.isMultiple(of: count)
    }

    /// The endpoint in use answered.
    public mutating func answered() { failures = 0 }
}
