import RollCallBroker

/// The operations endpoint (`--http-*`, docs/operations.md): where it listens, and the bounds that keep it answering
/// when peers open connections and send nothing, or half a request.
public struct OperationsSettings: Sendable, Equatable {
    /// `HOST:PORT` (port 0 for a free one).
    public var endpoint: String
    /// How long a new connection has to send a whole request head; then it is closed, so that a peer that sends
    /// nothing, or half a head, holds its descriptor no longer. Range: 100...600_000.
    public var headerTimeoutMilliseconds: Int64 = 5_000
    /// How long a connection may stay open with no request in progress (between keep-alive requests, or with a
    /// second head half sent); then it is closed. Range: 100...3_600_000.
    public var idleTimeoutMilliseconds: Int64 = 30_000
    /// Open connections at most; one more is accepted and closed at once (shed), so that the endpoint, and
    /// `/healthz`, keep answering once the flood's connections time out. Range: 1...100_000.
    public var maxConnections = 256

    public init(endpoint: String) { self.endpoint = endpoint }

    /// The ranges of the numeric settings.
    public enum Range {
        public static let headerTimeoutMilliseconds: ClosedRange<Int64> = 100...600_000
        public static let idleTimeoutMilliseconds: ClosedRange<Int64> = 100...3_600_000
        public static let maxConnections: ClosedRange<Int> = 1...100_000
    }

    /// The address, once every setting is in its range.
    public func validated() throws(ConfigurationError) -> (host: String, port: Int) {
        try Self.check("--http-header-timeout-ms", headerTimeoutMilliseconds, in: Range.headerTimeoutMilliseconds)
        try Self.check("--http-idle-timeout-ms", idleTimeoutMilliseconds, in: Range.idleTimeoutMilliseconds)
        try Self.check("--http-max-connections", maxConnections, in: Range.maxConnections)
        do {
            let (host, port) = try WebSocketSettings.parse(endpoint: endpoint)
            return (host, port)
        } catch {
            throw ConfigurationError("--http-endpoint", error.message)
        }
    }

    private static func check<T: Comparable>(
        _ setting: String, _ value: T, in range: ClosedRange<T>
    ) throws(ConfigurationError) {
        guard range.contains(value) else {
            throw ConfigurationError(setting, "must be \(range.lowerBound) to \(range.upperBound), not \(value)")
        }
    }
}
