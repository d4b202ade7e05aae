import ArgumentParser
import Foundation
import Logging
import RollCallBroker
import ServiceLifecycle

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the broker in the foreground until SIGTERM or SIGINT.",
        discussion: "Every option can also be set by its ROLLCALL_* environment variable; a flag wins."
    )

    @OptionGroup var endpoints: Endpoints

    @Option(help: "Heartbeat interval asked of clients, ms. Env: ROLLCALL_HEARTBEAT_MS. Default: 1000.")
    var heartbeatMs: Int64?

    @Option(help: "Session TTL when a hello names none, ms. Env: ROLLCALL_TTL_MS. Default: 3000.")
    var ttlMs: Int64?

    @Option(help: "Smallest TTL a client may ask for, ms. Env: ROLLCALL_MIN_TTL_MS. Default: 1000.")
    var minTtlMs: Int64?

    @Option(help: "Largest TTL a client may ask for, ms. Env: ROLLCALL_MAX_TTL_MS. Default: 3600000.")
    var maxTtlMs: Int64?

    @Option(
        help:
            "Largest request body, bytes (4x this drops the connection). Env: ROLLCALL_MAX_MESSAGE_BYTES. Default: 65536."
    )
    var maxMessageBytes: Int?

    @Option(help: "Live sessions in the broker. Env: ROLLCALL_MAX_SESSIONS. Default: 1000000.")
    var maxSessions: Int?

    @Option(help: "Live sessions per user. Env: ROLLCALL_MAX_SESSIONS_PER_USER. Default: 32.")
    var maxSessionsPerUser: Int?

    @Option(
        help: "Updates queued per subscriber before its updates are dropped. Env: ROLLCALL_UPDATE_HWM. Default: 10000.")
    var updateHwm: Int32?

    @Option(
        help:
            "How long a session whose connection closed may come back before it ends, ms. Env: ROLLCALL_OFFLINE_GRACE_MS. Default: 0."
    )
    var offlineGraceMs: Int64?

    @Option(
        help: """
            Where the state is kept across restarts (SQLite, WAL). Env: ROLLCALL_DATA_DIR. \
            Default: $XDG_STATE_HOME/rollcall, else ~/.local/state/rollcall.
            """)
    var dataDir: String?

    @Flag(help: "Keep no state across restarts. Env: ROLLCALL_EPHEMERAL=1.")
    var ephemeral = false

    @Option(
        help:
            "How often changes are written, ms: the most a kill -9 loses. Env: ROLLCALL_WRITE_INTERVAL_MS. Default: 200."
    )
    var writeIntervalMs: Int64?

    @Option(
        help:
            "How often the broker publishes its heartbeat on broker/, ms. Env: ROLLCALL_BROKER_HEARTBEAT_MS. Default: 1000."
    )
    var brokerHeartbeatMs: Int64?

    @Option(help: "At most one message per group per this window, ms. Env: ROLLCALL_GROUP_BATCH_MS. Default: 50.")
    var groupBatchMs: Int64?

    @Option(help: "Members of one group. Env: ROLLCALL_MAX_GROUP_SIZE. Default: 10000.")
    var maxGroupSize: Int?

    @Option(help: "Groups in the broker. Env: ROLLCALL_MAX_GROUPS. Default: 1000000.")
    var maxGroups: Int?

    @Option(help: "Memberships over all groups. Env: ROLLCALL_MAX_MEMBERSHIPS. Default: 10000000.")
    var maxMemberships: Int?

    @Option(
        help:
            "Largest reply body, bytes; longer group and query answers are paged. Env: ROLLCALL_MAX_REPLY_BYTES. Default: 65536."
    )
    var maxReplyBytes: Int?

    @Option(
        help:
            "Unread replies queued per command connection before more are dropped. Env: ROLLCALL_COMMAND_HWM. Default: 1000."
    )
    var commandHwm: Int32?

    @Option(
        help:
            "ZMTP PING interval on every connection, ms; 0 turns them off. Env: ROLLCALL_CONNECTION_HEARTBEAT_MS. Default: 10000."
    )
    var connectionHeartbeatMs: Int32?

    @Option(
        help:
            "Silence after a PING before a connection is closed, ms. Env: ROLLCALL_CONNECTION_HEARTBEAT_TIMEOUT_MS. Default: 20000."
    )
    var connectionHeartbeatTimeoutMs: Int32?

    @Option(
        help:
            "Silence from the broker after which peers close the connection (sent in PINGs), ms. Env: ROLLCALL_CONNECTION_HEARTBEAT_TTL_MS. Default: 60000."
    )
    var connectionHeartbeatTtlMs: Int32?

    @Option(help: "The broker's id in ping replies. Env: ROLLCALL_BROKER_ID. Default: the host name.")
    var brokerId: String?

    @Option(help: "trace, debug, info, notice, warning, error or critical. Env: ROLLCALL_LOG_LEVEL. Default: info.")
    var logLevel: String?

    func configuration() throws -> BrokerConfiguration {
        var c = BrokerConfiguration()
        c.commandEndpoint = try endpoints.command()
        c.updateEndpoint = try endpoints.update()
        c.presence.heartbeatMilliseconds = try setting(heartbeatMs, "ROLLCALL_HEARTBEAT_MS", default: 1_000)
        c.presence.defaultTTLMilliseconds = try setting(ttlMs, "ROLLCALL_TTL_MS", default: 3_000)
        c.presence.minTTLMilliseconds = try setting(minTtlMs, "ROLLCALL_MIN_TTL_MS", default: 1_000)
        c.presence.maxTTLMilliseconds = try setting(maxTtlMs, "ROLLCALL_MAX_TTL_MS", default: 3_600_000)
        c.maxMessageBytes = try setting(maxMessageBytes, "ROLLCALL_MAX_MESSAGE_BYTES", default: 65_536)
        c.presence.maxSessions = try setting(maxSessions, "ROLLCALL_MAX_SESSIONS", default: 1_000_000)
        c.presence.maxSessionsPerUser = try setting(maxSessionsPerUser, "ROLLCALL_MAX_SESSIONS_PER_USER", default: 32)
        c.updateHighWaterMark = try setting(updateHwm, "ROLLCALL_UPDATE_HWM", default: 10_000)
        c.brokerID = try setting(brokerId, "ROLLCALL_BROKER_ID", default: c.brokerID)
        c.maxReplyBytes = try setting(maxReplyBytes, "ROLLCALL_MAX_REPLY_BYTES", default: 65_536)
        c.commandHighWaterMark = try setting(commandHwm, "ROLLCALL_COMMAND_HWM", default: 1_000)
        c.connectionHeartbeatMilliseconds = try setting(
            connectionHeartbeatMs, "ROLLCALL_CONNECTION_HEARTBEAT_MS", default: 10_000)
        c.connectionHeartbeatTimeoutMilliseconds = try setting(
            connectionHeartbeatTimeoutMs, "ROLLCALL_CONNECTION_HEARTBEAT_TIMEOUT_MS", default: 20_000)
        c.connectionHeartbeatTTLMilliseconds = try setting(
            connectionHeartbeatTtlMs, "ROLLCALL_CONNECTION_HEARTBEAT_TTL_MS", default: 60_000)
        let environment = ProcessInfo.processInfo.environment
        if ephemeral || environment["ROLLCALL_EPHEMERAL"] == "1" {
            guard dataDir == nil else { throw ValidationError("--ephemeral and --data-dir exclude each other") }
            c.storage = .none
        } else {
            c.storage = .directory(try setting(dataDir, "ROLLCALL_DATA_DIR", default: defaultDataDirectory()))
        }
        c.writeIntervalMilliseconds = try setting(writeIntervalMs, "ROLLCALL_WRITE_INTERVAL_MS", default: 200)
        guard c.writeIntervalMilliseconds > 0 else { throw ValidationError("--write-interval-ms must be positive") }
        c.brokerHeartbeatMilliseconds = try setting(brokerHeartbeatMs, "ROLLCALL_BROKER_HEARTBEAT_MS", default: 1_000)
        c.presence.offlineGraceMilliseconds = try setting(offlineGraceMs, "ROLLCALL_OFFLINE_GRACE_MS", default: 0)
        c.presence.groupBatchMilliseconds = try setting(groupBatchMs, "ROLLCALL_GROUP_BATCH_MS", default: 50)
        c.presence.maxGroupSize = try setting(maxGroupSize, "ROLLCALL_MAX_GROUP_SIZE", default: 10_000)
        c.presence.maxGroups = try setting(maxGroups, "ROLLCALL_MAX_GROUPS", default: 1_000_000)
        c.presence.maxMemberships = try setting(maxMemberships, "ROLLCALL_MAX_MEMBERSHIPS", default: 10_000_000)

        let p = c.presence
        guard p.heartbeatMilliseconds > 0, p.minTTLMilliseconds > 0 else {
            throw ValidationError("--heartbeat-ms and --min-ttl-ms must be positive")
        }
        guard p.minTTLMilliseconds <= p.defaultTTLMilliseconds, p.defaultTTLMilliseconds <= p.maxTTLMilliseconds else {
            throw ValidationError("TTLs must satisfy --min-ttl-ms <= --ttl-ms <= --max-ttl-ms")
        }
        guard p.heartbeatMilliseconds < p.defaultTTLMilliseconds else {
            throw ValidationError("--heartbeat-ms must be shorter than --ttl-ms")
        }
        guard c.brokerHeartbeatMilliseconds > 0 else { throw ValidationError("--broker-heartbeat-ms must be positive") }
        guard p.offlineGraceMilliseconds >= 0 else { throw ValidationError("--offline-grace-ms must be >= 0") }
        guard p.groupBatchMilliseconds >= 0, p.maxGroupSize > 0, p.maxGroups > 0, p.maxMemberships > 0 else {
            throw ValidationError("--group-batch-ms must be >= 0 and the group limits positive")
        }
        guard c.maxMessageBytes >= 1_024, p.maxSessions > 0, p.maxSessionsPerUser > 0, c.updateHighWaterMark > 0 else {
            throw ValidationError("--max-message-bytes must be at least 1024; session limits and --update-hwm positive")
        }
        guard (16_384...16_777_216).contains(c.maxReplyBytes), c.commandHighWaterMark > 0 else {
            throw ValidationError("--max-reply-bytes must be 16384...16777216 and --command-hwm positive")
        }
        guard c.connectionHeartbeatMilliseconds >= 0, c.connectionHeartbeatTimeoutMilliseconds > 0,
            (0...6_553_500).contains(c.connectionHeartbeatTTLMilliseconds)
        else {
            throw ValidationError(
                "--connection-heartbeat-ms must be >= 0, --connection-heartbeat-timeout-ms positive, "
                    + "--connection-heartbeat-ttl-ms 0...6553500")
        }
        return c
    }

    func run() async throws {
        let configuration = try configuration()
        let levelText = try setting(logLevel, "ROLLCALL_LOG_LEVEL", default: "info")
        guard let level = Logger.Level(rawValue: levelText) else {
            throw ValidationError("unknown log level '\(levelText)'")
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "rollcall")
        let broker: Broker
        do {
            broker = try Broker(configuration: configuration, logger: logger)
        } catch {
            throw fail(error)
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: broker)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}

/// `$XDG_STATE_HOME/rollcall`, else `~/.local/state/rollcall`: a user's state directory, by the XDG convention.
func defaultDataDirectory() -> String {
    let environment = ProcessInfo.processInfo.environment
    if let state = environment["XDG_STATE_HOME"], !state.isEmpty { return state + "/rollcall" }
    return (environment["HOME"] ?? ".") + "/.local/state/rollcall"
}
