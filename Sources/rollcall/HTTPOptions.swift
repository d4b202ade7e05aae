import ArgumentParser
import Foundation
import RollCallOperations

/// The operations endpoint's defaults, written once in ``OperationsSettings``.
private let operationsDefaults = OperationsSettings(endpoint: "")

/// `rollcall serve`'s operations endpoint options (docs/operations.md).
struct HTTPOptions: ParsableArguments {
    @Option(
        help:
            "HOST:PORT for metrics, health, readiness and the status page (0: a free port). Env: ROLLCALL_HTTP_ENDPOINT. Default: off."
    )
    var httpEndpoint: String?

    @Option(
        help:
            "Time a connection to the HTTP endpoint has to send a whole request head, ms; then it is closed. Env: ROLLCALL_HTTP_HEADER_TIMEOUT_MS. Default: \(operationsDefaults.headerTimeoutMilliseconds)."
    )
    var httpHeaderTimeoutMs: Int64?

    @Option(
        help:
            "Time an HTTP connection may stay open with no request in progress, ms. Env: ROLLCALL_HTTP_IDLE_TIMEOUT_MS. Default: \(operationsDefaults.idleTimeoutMilliseconds)."
    )
    var httpIdleTimeoutMs: Int64?

    @Option(
        help:
            "Open HTTP connections at most; one more is closed at once. Env: ROLLCALL_HTTP_MAX_CONNECTIONS. Default: \(operationsDefaults.maxConnections)."
    )
    var httpMaxConnections: Int?

    /// The endpoint's settings, or `nil` if it is off.
    func settings() throws -> OperationsSettings? {
        let endpoint = try setting(httpEndpoint, "ROLLCALL_HTTP_ENDPOINT", default: "")
        guard !endpoint.isEmpty else { return nil }
        var s = OperationsSettings(endpoint: endpoint)
        s.headerTimeoutMilliseconds = try setting(
            httpHeaderTimeoutMs, "ROLLCALL_HTTP_HEADER_TIMEOUT_MS", default: s.headerTimeoutMilliseconds)
        s.idleTimeoutMilliseconds = try setting(
            httpIdleTimeoutMs, "ROLLCALL_HTTP_IDLE_TIMEOUT_MS", default: s.idleTimeoutMilliseconds)
        s.maxConnections = try setting(httpMaxConnections, "ROLLCALL_HTTP_MAX_CONNECTIONS", default: s.maxConnections)
        return s
    }
}
