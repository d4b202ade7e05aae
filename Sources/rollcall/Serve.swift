import ArgumentParser
import Foundation
import Logging
import RollCallBroker
import RollCallGateway
import RollCallOperations
import RollCallServer
import RollCallWire
import ServiceLifecycle
import UnixSignals

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the broker in the foreground until SIGTERM or SIGINT.",
        discussion: "Every option can also be set by its ROLLCALL_* environment variable; a flag wins."
    )

    @OptionGroup var endpoints: Endpoints

    @OptionGroup(title: "WebSocket") var webSocket: WebSocketOptions

    @Option(
        help:
            "Heartbeat interval asked of clients, ms. Env: ROLLCALL_HEARTBEAT_MS. Default: \(defaults.presence.heartbeatMilliseconds)."
    )
    var heartbeatMs: Int64?

    @Option(
        help:
            "Session TTL when a hello names none, ms. Env: ROLLCALL_TTL_MS. Default: \(defaults.presence.defaultTTLMilliseconds)."
    )
    var ttlMs: Int64?

    @Option(
        help:
            "Smallest TTL a client may ask for, ms. Env: ROLLCALL_MIN_TTL_MS. Default: \(defaults.presence.minTTLMilliseconds)."
    )
    var minTtlMs: Int64?

    @Option(
        help:
            "Largest TTL a client may ask for, ms. Env: ROLLCALL_MAX_TTL_MS. Default: \(defaults.presence.maxTTLMilliseconds)."
    )
    var maxTtlMs: Int64?

    @Option(
        help:
            "Largest request body, bytes (4x this drops the connection). Env: ROLLCALL_MAX_MESSAGE_BYTES. Default: \(defaults.maxMessageBytes)."
    )
    var maxMessageBytes: Int?

    @Option(help: "Live sessions in the broker. Env: ROLLCALL_MAX_SESSIONS. Default: \(defaults.presence.maxSessions).")
    var maxSessions: Int?

    @Option(
        help:
            "Live sessions per user. Env: ROLLCALL_MAX_SESSIONS_PER_USER. Default: \(defaults.presence.maxSessionsPerUser)."
    )
    var maxSessionsPerUser: Int?

    @Option(
        help:
            "Updates queued per subscriber before the broker holds its updates back. Env: ROLLCALL_UPDATE_HWM. Default: \(defaults.updateHighWaterMark)."
    )
    var updateHwm: Int32?

    @Option(
        help:
            "The longest an update waits for a full subscriber, ms. Env: ROLLCALL_UPDATE_STALL_MS. Default: \(defaults.updateStallMilliseconds)."
    )
    var updateStallMs: Int64?

    @Option(
        help:
            "Bytes of updates held back for full subscribers at most. Env: ROLLCALL_UPDATE_QUEUE_BYTES. Default: \(defaults.updateQueueBytes)."
    )
    var updateQueueBytes: Int?

    @Option(
        help:
            "How long a session whose connection closed may come back before it ends, ms. Env: ROLLCALL_OFFLINE_GRACE_MS. Default: \(defaults.presence.offlineGraceMilliseconds)."
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
            "How often changes are written, ms: the most a kill -9 loses. Env: ROLLCALL_WRITE_INTERVAL_MS. Default: \(defaults.writeIntervalMilliseconds)."
    )
    var writeIntervalMs: Int64?

    @Option(
        help:
            "How long the presence log keeps transitions, ms (docs/history.md); 0 keeps none. Env: ROLLCALL_HISTORY_RETENTION_MS. Default: \(defaults.historyRetentionMilliseconds) (7 days)."
    )
    var historyRetentionMs: Int64?

    @Flag(
        help:
            "Publish transitions before the presence log has committed them (about a millisecond sooner under load; a kill -9 can then lose from the log what subscribers saw: docs/history.md). Env: ROLLCALL_PUBLISH_BEFORE_COMMIT=1."
    )
    var publishBeforeCommit = false

    @Option(
        help:
            "How often the broker publishes its heartbeat on broker/, ms. Env: ROLLCALL_BROKER_HEARTBEAT_MS. Default: \(defaults.brokerHeartbeatMilliseconds)."
    )
    var brokerHeartbeatMs: Int64?

    @Option(
        help:
            "At most one message per group per this window, ms. Env: ROLLCALL_GROUP_BATCH_MS. Default: \(defaults.presence.groupBatchMilliseconds)."
    )
    var groupBatchMs: Int64?

    @Option(help: "Members of one group. Env: ROLLCALL_MAX_GROUP_SIZE. Default: \(defaults.presence.maxGroupSize).")
    var maxGroupSize: Int?
    @Option(
        help:
            "Contacts one user may list, and users one may block. Env: ROLLCALL_MAX_CONTACTS. Default: \(defaults.presence.maxContacts)."
    )
    var maxContacts: Int?

    @Option(
        help:
            "The app backend's contacts, one 'user: contact, contact' per line; read at start and on SIGHUP (docs/privacy.md). Env: ROLLCALL_CONTACTS_FILE. Default: none."
    )
    var contactsFile: String?

    @Option(help: "Groups in the broker. Env: ROLLCALL_MAX_GROUPS. Default: \(defaults.presence.maxGroups).")
    var maxGroups: Int?

    @Option(
        help:
            "Memberships over all groups. Env: ROLLCALL_MAX_MEMBERSHIPS. Default: \(defaults.presence.maxMemberships).")
    var maxMemberships: Int?

    @Option(
        help:
            "Largest reply body, bytes; longer group and query answers are paged. Env: ROLLCALL_MAX_REPLY_BYTES. Default: \(defaults.maxReplyBytes)."
    )
    var maxReplyBytes: Int?

    @Option(
        help:
            "Connections on the command endpoint; more are closed when accepted. Env: ROLLCALL_MAX_CONNECTIONS. Default: \(defaults.maxConnections)."
    )
    var maxConnections: Int?

    @Option(
        help:
            "Unread replies queued per command connection before more are dropped. Env: ROLLCALL_COMMAND_HWM. Default: \(defaults.commandHighWaterMark)."
    )
    var commandHwm: Int32?

    @Option(
        help:
            "ZMTP PING interval on every connection, ms; 0 turns them off. Env: ROLLCALL_CONNECTION_HEARTBEAT_MS. Default: \(defaults.connectionHeartbeatMilliseconds)."
    )
    var connectionHeartbeatMs: Int32?

    @Option(
        help:
            "Silence after a PING before a connection is closed, ms. Env: ROLLCALL_CONNECTION_HEARTBEAT_TIMEOUT_MS. Default: \(defaults.connectionHeartbeatTimeoutMilliseconds)."
    )
    var connectionHeartbeatTimeoutMs: Int32?

    @Option(
        help:
            "Silence from the broker after which peers close the connection (sent in PINGs), ms. Env: ROLLCALL_CONNECTION_HEARTBEAT_TTL_MS. Default: \(defaults.connectionHeartbeatTTLMilliseconds)."
    )
    var connectionHeartbeatTtlMs: Int32?

    @Option(
        help:
            "Secret key file (czmq certificate, from rollcall keygen): CURVE on both endpoints. Env: ROLLCALL_CURVE_SECRET_KEY_FILE. Default: off (NULL mechanism, no authentication)."
    )
    var curveSecretKeyFile: String?

    @Option(
        help:
            "The keys that may connect, with their roles (required with CURVE; SIGHUP reloads it). Env: ROLLCALL_AUTHORIZED_KEYS."
    )
    var authorizedKeys: String?

    @Flag(
        help:
            "Allow a non-loopback endpoint without CURVE (or a WebSocket without tokens and TLS): anyone who reaches it may act as anyone. Env: ROLLCALL_INSECURE=1."
    )
    var insecure = false

    @Option(help: "The broker's id in ping replies. Env: ROLLCALL_BROKER_ID. Default: the host name.")
    var brokerId: String?

    @Option(help: "trace, debug, info, notice, warning, error or critical. Env: ROLLCALL_LOG_LEVEL. Default: info.")
    var logLevel: String?

    @Option(help: "text, or json (one object per line, for log shippers). Env: ROLLCALL_LOG_FORMAT. Default: text.")
    var logFormat: String?

    @OptionGroup(title: "Operations endpoint") var http: HTTPOptions

    @OptionGroup(title: "Webhooks") var webhooks: WebhookOptions

    @Flag(
        help:
            "Test mode: the clock moves only by advance requests; free loopback ports unless given; nothing kept. Never in production."
    )
    var testMode = false

    @Option(
        help:
            "Run as a node of a cluster on etcd: its members' client URLs, etcd://HOST:PORT[,HOST:PORT...] (docs/cluster.md). Env: ROLLCALL_CLUSTER. Default: off (one broker, SQLite)."
    )
    var cluster: String?

    @Option(help: "This node's name in the cluster (with --cluster). Env: ROLLCALL_NODE_ID. Default: the host name.")
    var nodeId: String?

    @Option(
        help:
            "The node's lease in etcd, ms: a lost node's sessions end everywhere within it (plus 1 s). Env: ROLLCALL_NODE_LEASE_MS. Default: \(ClusterSettings.defaultLeaseMilliseconds)."
    )
    var nodeLeaseMs: Int64?

    @Flag(help: "Once ready, print one JSON line with the bound endpoints and the epoch on stdout.")
    var printEndpoints = false

    /// What the flags and environment say, each setting from its flag, else its `ROLLCALL_*` variable, else its
    /// default; the rules across settings are the assembly's (``ServeOptions/configuration()``).
    func options() throws -> ServeOptions {
        let environment = ProcessInfo.processInfo.environment
        var c = defaults
        c.testMode = testMode
        c.presence.heartbeatMilliseconds = try setting(
            heartbeatMs, "ROLLCALL_HEARTBEAT_MS", default: c.presence.heartbeatMilliseconds)
        c.presence.defaultTTLMilliseconds = try setting(
            ttlMs, "ROLLCALL_TTL_MS", default: c.presence.defaultTTLMilliseconds)
        c.presence.minTTLMilliseconds = try setting(
            minTtlMs, "ROLLCALL_MIN_TTL_MS", default: c.presence.minTTLMilliseconds)
        c.presence.maxTTLMilliseconds = try setting(
            maxTtlMs, "ROLLCALL_MAX_TTL_MS", default: c.presence.maxTTLMilliseconds)
        c.maxMessageBytes = try setting(maxMessageBytes, "ROLLCALL_MAX_MESSAGE_BYTES", default: c.maxMessageBytes)
        c.presence.maxSessions = try setting(maxSessions, "ROLLCALL_MAX_SESSIONS", default: c.presence.maxSessions)
        c.presence.maxSessionsPerUser = try setting(
            maxSessionsPerUser, "ROLLCALL_MAX_SESSIONS_PER_USER", default: c.presence.maxSessionsPerUser)
        c.updateHighWaterMark = try setting(updateHwm, "ROLLCALL_UPDATE_HWM", default: c.updateHighWaterMark)
        c.updateStallMilliseconds = try setting(
            updateStallMs, "ROLLCALL_UPDATE_STALL_MS", default: c.updateStallMilliseconds)
        c.updateQueueBytes = try setting(updateQueueBytes, "ROLLCALL_UPDATE_QUEUE_BYTES", default: c.updateQueueBytes)
        c.brokerID = try setting(brokerId, "ROLLCALL_BROKER_ID", default: c.brokerID)
        c.maxReplyBytes = try setting(maxReplyBytes, "ROLLCALL_MAX_REPLY_BYTES", default: c.maxReplyBytes)
        c.maxConnections = try setting(maxConnections, "ROLLCALL_MAX_CONNECTIONS", default: c.maxConnections)
        c.commandHighWaterMark = try setting(commandHwm, "ROLLCALL_COMMAND_HWM", default: c.commandHighWaterMark)
        c.connectionHeartbeatMilliseconds = try setting(
            connectionHeartbeatMs, "ROLLCALL_CONNECTION_HEARTBEAT_MS", default: c.connectionHeartbeatMilliseconds)
        c.connectionHeartbeatTimeoutMilliseconds = try setting(
            connectionHeartbeatTimeoutMs, "ROLLCALL_CONNECTION_HEARTBEAT_TIMEOUT_MS",
            default: c.connectionHeartbeatTimeoutMilliseconds)
        c.connectionHeartbeatTTLMilliseconds = try setting(
            connectionHeartbeatTtlMs, "ROLLCALL_CONNECTION_HEARTBEAT_TTL_MS",
            default: c.connectionHeartbeatTTLMilliseconds)
        c.writeIntervalMilliseconds = try setting(
            writeIntervalMs, "ROLLCALL_WRITE_INTERVAL_MS", default: c.writeIntervalMilliseconds)
        c.historyRetentionMilliseconds = try setting(
            historyRetentionMs, "ROLLCALL_HISTORY_RETENTION_MS", default: c.historyRetentionMilliseconds)
        c.publishesBeforeCommit = publishBeforeCommit || environment["ROLLCALL_PUBLISH_BEFORE_COMMIT"] == "1"
        c.brokerHeartbeatMilliseconds = try setting(
            brokerHeartbeatMs, "ROLLCALL_BROKER_HEARTBEAT_MS", default: c.brokerHeartbeatMilliseconds)
        c.presence.offlineGraceMilliseconds = try setting(
            offlineGraceMs, "ROLLCALL_OFFLINE_GRACE_MS", default: c.presence.offlineGraceMilliseconds)
        c.presence.groupBatchMilliseconds = try setting(
            groupBatchMs, "ROLLCALL_GROUP_BATCH_MS", default: c.presence.groupBatchMilliseconds)
        c.presence.maxGroupSize = try setting(maxGroupSize, "ROLLCALL_MAX_GROUP_SIZE", default: c.presence.maxGroupSize)
        c.presence.maxContacts = try setting(maxContacts, "ROLLCALL_MAX_CONTACTS", default: c.presence.maxContacts)
        c.contactsFile = contactsFile ?? environment["ROLLCALL_CONTACTS_FILE"]
        c.presence.maxGroups = try setting(maxGroups, "ROLLCALL_MAX_GROUPS", default: c.presence.maxGroups)
        c.presence.maxMemberships = try setting(
            maxMemberships, "ROLLCALL_MAX_MEMBERSHIPS", default: c.presence.maxMemberships)
        try webSocket.apply(to: &c)
        c.insecure = insecure || environment["ROLLCALL_INSECURE"] == "1"
        var o = ServeOptions()
        o.broker = c
        o.commandEndpoint = endpoints.commandEndpoint ?? environment["ROLLCALL_COMMAND_ENDPOINT"]
        o.updateEndpoint = endpoints.updateEndpoint ?? environment["ROLLCALL_UPDATE_ENDPOINT"]
        o.dataDirectory = dataDir
        o.defaultDataDirectory = environment["ROLLCALL_DATA_DIR"] ?? defaultDataDirectory()
        o.ephemeral = ephemeral || environment["ROLLCALL_EPHEMERAL"] == "1"
        o.cluster = cluster ?? environment["ROLLCALL_CLUSTER"]
        // The node's settings from the environment count only on a node: a unit file may set them for every host.
        let onNode = o.cluster != nil
        o.nodeID = nodeId ?? (onNode ? environment["ROLLCALL_NODE_ID"] : nil)
        if let lease = nodeLeaseMs {
            o.nodeLeaseMilliseconds = lease
        } else if onNode, let text = environment["ROLLCALL_NODE_LEASE_MS"] {
            o.nodeLeaseMilliseconds = try parseSetting(text, "ROLLCALL_NODE_LEASE_MS")
        }
        o.curveSecretKeyFile = curveSecretKeyFile ?? environment["ROLLCALL_CURVE_SECRET_KEY_FILE"]
        o.authorizedKeysFile = authorizedKeys ?? environment["ROLLCALL_AUTHORIZED_KEYS"]
        o.operations = try http.settings()
        (o.webhooks, o.webhookSecretFile) = try webhooks.settings()
        return o
    }

    func run() async throws {
        // A reader of stderr that goes away (`| head`, a log shipper restarting) must not kill the broker: a failed
        // log write is an error code, never a signal. So must a file-size limit reached by the store.
        signal(SIGPIPE, SIG_IGN)
        signal(SIGXFSZ, SIG_IGN)
        // SIGHUP (a closing terminal or ssh session), SIGUSR1/2 and SIGALRM would end the process before its final
        // write; they are caught from the start and noted instead.
        let otherSignals = await UnixSignalsSequence(trapping: .sighup, .sigusr1, .sigusr2, .sigalrm)
        let configuration: ServerConfiguration
        do {
            configuration = try options().configuration()
        } catch let error as ConfigurationError {
            // A setting out of range is a usage error (64, EX_USAGE): systemd's unit does not restart on it.
            _ = fail(error)
            throw ExitCode(64)
        }
        let levelText = try setting(logLevel, "ROLLCALL_LOG_LEVEL", default: "info")
        guard let level = Logger.Level(rawValue: levelText) else {
            throw ValidationError("unknown log level '\(levelText)'")
        }
        let format = try setting(logFormat, "ROLLCALL_LOG_FORMAT", default: "text")
        guard format == "text" || format == "json" else {
            throw ValidationError("--log-format must be text or json, not '\(format)'")
        }
        LoggingSystem.bootstrap { label in
            var handler: any LogHandler =
                format == "json" ? JSONLogHandler(label: label) : StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "rollcall")
        // The metrics backend comes before the broker, whose metrics are made with it.
        let exporter = configuration.operations.map { _ in MetricsExporter() }
        exporter?.bootstrap()
        let server: RollCallServer
        do {
            server = try await RollCallServer(
                configuration, logger: logger, metrics: exporter, environment: ProcessInfo.processInfo.environment)
        } catch BrokerError.contactsFile(let error) {
            // A file that cannot be used is a usage error (64), as a bad authorized-keys file is.
            _ = fail(BrokerError.contactsFile(error))
            throw ExitCode(64)
        } catch {
            throw fail(error)
        }
        if configuration.broker.testMode {
            logger.warning(
                "TEST MODE: the clock moves only by advance requests and nothing is kept; never run this in production")
        }
        let group = server.serviceGroup(gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            if printEndpoints {
                tasks.addTask { try await Self.printEndpoints(of: server) }
            }
            tasks.addTask {
                for await signal in otherSignals {
                    await server.received(signal == .sighup ? .hangup : .other("\(signal)"))
                }
            }
            defer { tasks.cancelAll() }
            do {
                try await group.run()
            } catch {
                throw fail(error)
            }
        }
    }

    /// Once the broker turns and every endpoint listens, one JSON line with their addresses and the epoch.
    private static func printEndpoints(of server: RollCallServer) async throws {
        let broker = server.broker
        while !broker.isRunning || (server.operations != nil && server.operationsAddress == nil)
            || (server.webSocket != nil && server.webSocketAddress == nil)
        {
            try await Task.sleep(for: .milliseconds(1))
        }
        var line = JSONWriter()
        line.beginObject()
        line.key("command")
        line.string(broker.commandEndpoint)
        line.key("update")
        line.string(broker.updateEndpoint)
        if let http = server.operationsAddress {
            line.key("http")
            line.string(http)
        }
        if let ws = server.webSocketAddress {
            line.key("ws")
            line.string("\(ws)\(WebSocketServer.path)")
        }
        line.key("epoch")
        line.string(broker.epoch)
        line.key("test_mode")
        line.bool(server.configuration.broker.testMode)
        line.endObject()
        emit(String(decoding: line.bytes, as: UTF8.self))
    }
}

/// `$XDG_STATE_HOME/rollcall`, else `~/.local/state/rollcall`: a user's state directory, by the XDG convention.
func defaultDataDirectory() -> String {
    let environment = ProcessInfo.processInfo.environment
    if let state = environment["XDG_STATE_HOME"], !state.isEmpty { return state + "/rollcall" }
    return (environment["HOME"] ?? ".") + "/.local/state/rollcall"
}
