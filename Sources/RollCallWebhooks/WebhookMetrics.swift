import Metrics

/// One URL's metrics through the swift-metrics API (the executable chooses the backend): made once per URL, so that
/// delivery only sets, increments and records.
struct WebhookMetrics: Sendable {
    /// How a delivery attempt ended: the `result` dimension of `rollcall_webhook_deliveries_total`.
    enum Result: String, CaseIterable, Sendable {
        /// A 2xx: the batch is acknowledged.
        case ok
        /// Any other status.
        case httpError = "http_error"
        /// No whole answer within `--webhook-timeout-ms`.
        case timeout
        /// The connection was refused, reset or could not be made.
        case connectionError = "connection_error"
        /// A batch given up after the retry window (counted once per batch, beside its last failure).
        case skipped
    }

    /// Events after the URL's cursor: read from the log at most once a second.
    let pending: Gauge
    /// POST attempts by result, and skipped batches.
    private let results: [Result: Counter]
    /// The time from a POST's start to its answer (or failure).
    let latency: Timer
    /// Times retention trimmed entries the URL had not received yet (docs/webhooks.md: keep retention longer than
    /// the retry window).
    let trimmedGaps: Counter

    /// `type` is the stream's: `presence.changed` or `presence.offline_for`.
    init(url: String, type: String) {
        pending = Gauge(label: "rollcall_webhook_pending_events", dimensions: [("url", url)])
        results = Dictionary(
            uniqueKeysWithValues: Result.allCases.map {
                (
                    $0,
                    Counter(
                        label: "rollcall_webhook_deliveries_total",
                        dimensions: [("url", url), ("type", type), ("result", $0.rawValue)])
                )
            })
        latency = Timer(label: "rollcall_webhook_delivery_seconds", dimensions: [("url", url), ("type", type)])
        trimmedGaps = Counter(label: "rollcall_webhook_trimmed_gaps_total", dimensions: [("url", url), ("type", type)])
    }

    func count(_ result: Result) { results[result]?.increment() }

    func recordLatency(since start: ContinuousClock.Instant) {
        let elapsed = start.duration(to: .now).components
        latency.recordNanoseconds(elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000)
    }
}
