import RollCallCore

/// Why a configuration cannot run: one setting out of its documented range, or two that contradict each other.
/// Settings are named as `rollcall serve` spells them, which is how the documentation names them too.
public struct ConfigurationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The setting at fault, such as `--ttl-ms`.
    public var setting: String
    public var message: String
    public var description: String { "\(setting) \(message)" }

    public init(_ setting: String, _ message: String) {
        self.setting = setting
        self.message = message
    }
}

extension BrokerConfiguration {
    /// The documented range of every numeric setting. A day is the longest time any setting takes: every deadline
    /// the broker computes is `now` plus one of them, so none can overflow, and "never" is not a setting.
    public enum Range {
        public static let day: Int64 = 86_400_000
        public static let heartbeatMilliseconds: ClosedRange<Int64> = 1...3_600_000
        public static let ttlMilliseconds: ClosedRange<Int64> = 1...day
        public static let offlineGraceMilliseconds: ClosedRange<Int64> = 0...day
        public static let writeIntervalMilliseconds: ClosedRange<Int64> = 1...3_600_000
        /// Up to ten years: the log's times are broker milliseconds, far from overflowing.
        public static let historyRetentionMilliseconds: ClosedRange<Int64> = 0...(3_650 * day)
        public static let brokerHeartbeatMilliseconds: ClosedRange<Int64> = 10...3_600_000
        public static let groupBatchMilliseconds: ClosedRange<Int64> = 0...60_000
        public static let maxMessageBytes: ClosedRange<Int> = 1_024...16_777_216
        public static let maxSessions: ClosedRange<Int> = 1...100_000_000
        public static let maxSessionsPerUser: ClosedRange<Int> = 1...10_000
        public static let updateHighWaterMark: ClosedRange<Int32> = 1...10_000_000
        public static let maxGroupSize: ClosedRange<Int> = 1...1_000_000
        public static let maxContacts: ClosedRange<Int> = 1...1_000_000
        public static let maxGroups: ClosedRange<Int> = 1...100_000_000
        public static let maxMemberships: ClosedRange<Int> = 1...1_000_000_000
        public static let brokerIDBytes: ClosedRange<Int> = 1...256
        public static let updateStallMilliseconds: ClosedRange<Int64> = 1...60_000
        public static let updateQueueBytes: ClosedRange<Int> = 65_536...68_719_476_736
        public static let maxReplyBytes: ClosedRange<Int> = 16_384...16_777_216
        public static let commandHighWaterMark: ClosedRange<Int32> = 1...1_000_000
        public static let connectionHeartbeatMilliseconds: ClosedRange<Int32> = 0...3_600_000
        public static let connectionHeartbeatTimeoutMilliseconds: ClosedRange<Int32> = 1...3_600_000
        public static let connectionHeartbeatTTLMilliseconds: ClosedRange<Int32> = 0...6_553_500
        public static let maxConnections: ClosedRange<Int> = 1...10_000_000
    }

    /// Checks every setting against its documented range and the settings against each other; the broker runs
    /// only a configuration that passes. The first problem found is thrown.
    public func validate() throws(ConfigurationError) {
        try Self.check("--command-endpoint", endpoint: commandEndpoint)
        try Self.check("--update-endpoint", endpoint: updateEndpoint)
        let p = presence
        try Self.check("--heartbeat-ms", p.heartbeatMilliseconds, in: Range.heartbeatMilliseconds)
        try Self.check("--ttl-ms", p.defaultTTLMilliseconds, in: Range.ttlMilliseconds)
        try Self.check("--min-ttl-ms", p.minTTLMilliseconds, in: Range.ttlMilliseconds)
        try Self.check("--max-ttl-ms", p.maxTTLMilliseconds, in: Range.ttlMilliseconds)
        try Self.check("--offline-grace-ms", p.offlineGraceMilliseconds, in: Range.offlineGraceMilliseconds)
        try Self.check("--group-batch-ms", p.groupBatchMilliseconds, in: Range.groupBatchMilliseconds)
        try Self.check("--max-sessions", p.maxSessions, in: Range.maxSessions)
        try Self.check("--max-sessions-per-user", p.maxSessionsPerUser, in: Range.maxSessionsPerUser)
        try Self.check("--max-group-size", p.maxGroupSize, in: Range.maxGroupSize)
        try Self.check("--max-contacts", p.maxContacts, in: Range.maxContacts)
        try Self.check("--max-groups", p.maxGroups, in: Range.maxGroups)
        try Self.check("--max-memberships", p.maxMemberships, in: Range.maxMemberships)
        try Self.check("--max-message-bytes", maxMessageBytes, in: Range.maxMessageBytes)
        try Self.check("--update-hwm", updateHighWaterMark, in: Range.updateHighWaterMark)
        try Self.check("--write-interval-ms", writeIntervalMilliseconds, in: Range.writeIntervalMilliseconds)
        try Self.check(
            "--history-retention-ms", historyRetentionMilliseconds, in: Range.historyRetentionMilliseconds)
        try Self.check("--broker-heartbeat-ms", brokerHeartbeatMilliseconds, in: Range.brokerHeartbeatMilliseconds)
        try Self.check("--broker-id", brokerID.utf8.count, in: Range.brokerIDBytes, unit: "bytes long")
        try Self.check("--update-stall-ms", updateStallMilliseconds, in: Range.updateStallMilliseconds)
        try Self.check("--update-queue-bytes", updateQueueBytes, in: Range.updateQueueBytes)
        try Self.check("--max-reply-bytes", maxReplyBytes, in: Range.maxReplyBytes)
        try Self.check("--max-connections", maxConnections, in: Range.maxConnections)
        try Self.check("--command-hwm", commandHighWaterMark, in: Range.commandHighWaterMark)
        try Self.check(
            "--connection-heartbeat-ms", connectionHeartbeatMilliseconds, in: Range.connectionHeartbeatMilliseconds)
        try Self.check(
            "--connection-heartbeat-timeout-ms", connectionHeartbeatTimeoutMilliseconds,
            in: Range.connectionHeartbeatTimeoutMilliseconds)
        try Self.check(
            "--connection-heartbeat-ttl-ms", connectionHeartbeatTTLMilliseconds,
            in: Range.connectionHeartbeatTTLMilliseconds)

        guard p.minTTLMilliseconds <= p.defaultTTLMilliseconds, p.defaultTTLMilliseconds <= p.maxTTLMilliseconds else {
            throw ConfigurationError(
                "--ttl-ms",
                "(\(p.defaultTTLMilliseconds)) must lie between --min-ttl-ms (\(p.minTTLMilliseconds)) "
                    + "and --max-ttl-ms (\(p.maxTTLMilliseconds))")
        }
        if testMode {
            for (setting, endpoint) in [("--command-endpoint", commandEndpoint), ("--update-endpoint", updateEndpoint)]
            where !Self.isLocal(endpoint) {
                throw ConfigurationError(
                    setting, "must be a loopback, ipc:// or inproc:// endpoint in --test-mode, not '\(endpoint)'")
            }
        }
        if curve == nil && !insecure {
            for (setting, endpoint) in [("--command-endpoint", commandEndpoint), ("--update-endpoint", updateEndpoint)]
            where !Self.isLocal(endpoint) {
                throw ConfigurationError(
                    setting,
                    "'\(endpoint)' is not loopback and CURVE is off, so anyone who reaches it could act as anyone: "
                        + "give --curve-secret-key-file and --authorized-keys (docs/security.md), or --insecure")
            }
        }
        if contactsFile != nil && cluster != nil {
            // Contacts live in one broker's core; a node of a cluster answers op `contacts` with unknown_op.
            throw ConfigurationError("--contacts-file", "is not available with --cluster (docs/privacy.md)")
        }
        try validateWebSocket()
        try validateCluster()
        guard p.heartbeatMilliseconds < p.defaultTTLMilliseconds else {
            throw ConfigurationError(
                "--heartbeat-ms",
                "(\(p.heartbeatMilliseconds)) must be shorter than --ttl-ms (\(p.defaultTTLMilliseconds))")
        }
    }

    static func check<T: BinaryInteger>(
        _ setting: String, _ value: T, in range: ClosedRange<T>, unit: String = ""
    ) throws(ConfigurationError) {
        guard !range.contains(value) else { return }
        let what = unit.isEmpty ? "" : " \(unit)"
        throw ConfigurationError(
            setting, "must be\(what) from \(range.lowerBound) to \(range.upperBound), not \(value)")
    }

    /// Whether only this machine can reach `endpoint`: loopback TCP, ipc or inproc.
    static func isLocal(_ endpoint: String) -> Bool {
        if endpoint.hasPrefix("ipc://") || endpoint.hasPrefix("inproc://") { return true }
        for prefix in ["tcp://127.", "tcp://localhost:", "tcp://[::1]:"] where endpoint.hasPrefix(prefix) {
            return true
        }
        return false
    }

    /// A `tcp://` endpoint needs a host and a port from 1 to 65535 or `*` (libzmq would silently bind port 99999 as
    /// 34463); `ipc://` and `inproc://` need a name.
    static func check(_ setting: String, endpoint: String) throws(ConfigurationError) {
        let usage = "must be tcp://HOST:PORT (port 1 to 65535, or * for a free one), ipc://PATH or inproc://NAME"
        if endpoint.hasPrefix("ipc://") || endpoint.hasPrefix("inproc://") {
            guard !endpoint.hasSuffix("//") else { throw ConfigurationError(setting, "\(usage), not '\(endpoint)'") }
            return
        }
        guard endpoint.hasPrefix("tcp://"), let colon = endpoint.lastIndex(of: ":"),
            endpoint.distance(from: endpoint.startIndex, to: colon) > "tcp://".count
        else { throw ConfigurationError(setting, "\(usage), not '\(endpoint)'") }
        let port = endpoint[endpoint.index(after: colon)...]
        if port == "*" { return }
        guard let number = Int(port), (1...65_535).contains(number), port.allSatisfy(\.isASCII) else {
            throw ConfigurationError(setting, "\(usage), not '\(endpoint)'")
        }
    }
}
