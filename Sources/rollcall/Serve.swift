import ArgumentParser
import Foundation
import Logging
import RollCallBroker
import RollCallGateway
import RollCallOperations
import RollCallSecurity
import RollCallWire
import ServiceLifecycle
import Synchronization
import UnixSignals

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the broker in the foreground until SIGTERM or SIGINT.",
        discussion: "Every option can also be set by its ROLLCALL_* environment variable; a flag wins."
    )

    @OptionGroup var endpoints: Endpoints

    @OptionGroup(title: "WebSocket") var webSocket: WebSocketOptions

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
        help:
            "Updates queued per subscriber before the broker holds its updates back. Env: ROLLCALL_UPDATE_HWM. Default: 10000."
    )
    var updateHwm: Int32?

    @Option(
        help:
            "The longest an update waits for a full subscriber, ms. Env: ROLLCALL_UPDATE_STALL_MS. Default: 1000."
    )
    var updateStallMs: Int64?

    @Option(
        help:
            "Bytes of updates held back for full subscribers at most. Env: ROLLCALL_UPDATE_QUEUE_BYTES. Default: 67108864."
    )
    var updateQueueBytes: Int?

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
            "Connections on the command endpoint; more are closed when accepted. Env: ROLLCALL_MAX_CONNECTIONS. Default: 60000."
    )
    var maxConnections: Int?

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

    @Option(
        help:
            "HOST:PORT for metrics, health, readiness and the status page (0: a free port). Env: ROLLCALL_HTTP_ENDPOINT. Default: off."
    )
    var httpEndpoint: String?

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
            "The node's lease in etcd, ms: a lost node's sessions end everywhere within it (plus 1 s). Env: ROLLCALL_NODE_LEASE_MS. Default: 5000."
    )
    var nodeLeaseMs: Int64?

    @Flag(help: "Once ready, print one JSON line with the bound endpoints and the epoch on stdout.")
    var printEndpoints = false

    func configuration() throws -> BrokerConfiguration {
        var c = BrokerConfiguration()
        c.testMode = testMode
        // Test mode takes free loopback ports unless told otherwise, so that tests can run side by side.
        let free = "tcp://127.0.0.1:*"
        c.commandEndpoint =
            testMode
            ? try setting(endpoints.commandEndpoint, "ROLLCALL_COMMAND_ENDPOINT", default: free)
            : try endpoints.command()
        c.updateEndpoint =
            testMode
            ? try setting(endpoints.updateEndpoint, "ROLLCALL_UPDATE_ENDPOINT", default: free) : try endpoints.update()
        c.presence.heartbeatMilliseconds = try setting(heartbeatMs, "ROLLCALL_HEARTBEAT_MS", default: 1_000)
        c.presence.defaultTTLMilliseconds = try setting(ttlMs, "ROLLCALL_TTL_MS", default: 3_000)
        c.presence.minTTLMilliseconds = try setting(minTtlMs, "ROLLCALL_MIN_TTL_MS", default: 1_000)
        c.presence.maxTTLMilliseconds = try setting(maxTtlMs, "ROLLCALL_MAX_TTL_MS", default: 3_600_000)
        c.maxMessageBytes = try setting(maxMessageBytes, "ROLLCALL_MAX_MESSAGE_BYTES", default: 65_536)
        c.presence.maxSessions = try setting(maxSessions, "ROLLCALL_MAX_SESSIONS", default: 1_000_000)
        c.presence.maxSessionsPerUser = try setting(maxSessionsPerUser, "ROLLCALL_MAX_SESSIONS_PER_USER", default: 32)
        c.updateHighWaterMark = try setting(updateHwm, "ROLLCALL_UPDATE_HWM", default: 10_000)
        c.updateStallMilliseconds = try setting(updateStallMs, "ROLLCALL_UPDATE_STALL_MS", default: 1_000)
        c.updateQueueBytes = try setting(updateQueueBytes, "ROLLCALL_UPDATE_QUEUE_BYTES", default: 67_108_864)
        c.brokerID = try setting(brokerId, "ROLLCALL_BROKER_ID", default: c.brokerID)
        c.maxReplyBytes = try setting(maxReplyBytes, "ROLLCALL_MAX_REPLY_BYTES", default: 65_536)
        c.maxConnections = try setting(maxConnections, "ROLLCALL_MAX_CONNECTIONS", default: 60_000)
        c.commandHighWaterMark = try setting(commandHwm, "ROLLCALL_COMMAND_HWM", default: 1_000)
        c.connectionHeartbeatMilliseconds = try setting(
            connectionHeartbeatMs, "ROLLCALL_CONNECTION_HEARTBEAT_MS", default: 10_000)
        c.connectionHeartbeatTimeoutMilliseconds = try setting(
            connectionHeartbeatTimeoutMs, "ROLLCALL_CONNECTION_HEARTBEAT_TIMEOUT_MS", default: 20_000)
        c.connectionHeartbeatTTLMilliseconds = try setting(
            connectionHeartbeatTtlMs, "ROLLCALL_CONNECTION_HEARTBEAT_TTL_MS", default: 60_000)
        let environment = ProcessInfo.processInfo.environment
        let clusterURLs = cluster ?? environment["ROLLCALL_CLUSTER"]
        // A node of a cluster keeps its state in etcd: no data directory unless one is named (which is refused).
        if ephemeral || environment["ROLLCALL_EPHEMERAL"] == "1" || ((testMode || clusterURLs != nil) && dataDir == nil)
        {
            guard dataDir == nil else { throw ValidationError("--ephemeral and --data-dir exclude each other") }
            c.storage = .none
        } else {
            c.storage = .directory(try setting(dataDir, "ROLLCALL_DATA_DIR", default: defaultDataDirectory()))
        }
        c.writeIntervalMilliseconds = try setting(writeIntervalMs, "ROLLCALL_WRITE_INTERVAL_MS", default: 200)
        c.brokerHeartbeatMilliseconds = try setting(brokerHeartbeatMs, "ROLLCALL_BROKER_HEARTBEAT_MS", default: 1_000)
        c.presence.offlineGraceMilliseconds = try setting(offlineGraceMs, "ROLLCALL_OFFLINE_GRACE_MS", default: 0)
        c.presence.groupBatchMilliseconds = try setting(groupBatchMs, "ROLLCALL_GROUP_BATCH_MS", default: 50)
        c.presence.maxGroupSize = try setting(maxGroupSize, "ROLLCALL_MAX_GROUP_SIZE", default: 10_000)
        c.presence.maxGroups = try setting(maxGroups, "ROLLCALL_MAX_GROUPS", default: 1_000_000)
        c.presence.maxMemberships = try setting(maxMemberships, "ROLLCALL_MAX_MEMBERSHIPS", default: 10_000_000)
        try webSocket.apply(to: &c)
        c.insecure = insecure || environment["ROLLCALL_INSECURE"] == "1"
        c.curve = try curveSettings(environment)
        if let clusterURLs {
            let nodeID = try setting(nodeId, "ROLLCALL_NODE_ID", default: c.brokerID)
            if nodeId == nil && environment["ROLLCALL_NODE_ID"] == nil && !ClusterSettings.isValidNodeID(nodeID) {
                throw ConfigurationError(
                    "--node-id",
                    "was not given, and the broker id '\(nodeID)' (--broker-id, else the host name) is not a valid "
                        + "node id (1 to 64 of A-Z a-z 0-9 . _ -): give --node-id")
            }
            c.cluster = try ClusterSettings(
                cluster: clusterURLs, nodeID: nodeID,
                leaseMilliseconds: try setting(nodeLeaseMs, "ROLLCALL_NODE_LEASE_MS", default: 5_000))
        } else if nodeId != nil || nodeLeaseMs != nil {
            throw ConfigurationError("--node-id", "and --node-lease-ms need --cluster")
        }
        // The ranges and the checks across settings belong to the broker library, which any embedder gets too.
        try c.validate()
        return c
    }

    /// The key pair and the authorized-keys table, read at start: a file that cannot be used stops the start with
    /// one line that names it (and the line at fault).
    private func curveSettings(_ environment: [String: String]) throws -> CurveSettings? {
        let secretFile = curveSecretKeyFile ?? environment["ROLLCALL_CURVE_SECRET_KEY_FILE"]
        let keysFile = authorizedKeys ?? environment["ROLLCALL_AUTHORIZED_KEYS"]
        guard let secretFile else {
            guard keysFile == nil else {
                throw ConfigurationError(
                    "--authorized-keys", "needs --curve-secret-key-file: CURVE is what checks keys")
            }
            return nil
        }
        guard let keysFile else {
            throw ConfigurationError(
                "--curve-secret-key-file", "needs --authorized-keys: the table of keys that may connect")
        }
        let certificate: Certificate
        do {
            certificate = try CertificateFile.read(secretFile)
        } catch {
            throw ConfigurationError("--curve-secret-key-file", "\(error)")
        }
        guard let secret = certificate.secretKey else {
            throw ConfigurationError(
                "--curve-secret-key-file", "\(secretFile) is a public certificate: the broker needs its secret key")
        }
        switch AuthorizedKeys.load(path: keysFile) {
        case .success(let keys):
            // A file of comments only (or one misread, such as a table whose every key line was commented out)
            // would lock everyone out without a word.
            guard !keys.roles.isEmpty else {
                throw ConfigurationError("--authorized-keys", "\(keysFile) lists no key: nobody could connect")
            }
            return CurveSettings(secretKey: secret.z85, authorizedKeys: keys, authorizedKeysPath: keysFile)
        case .failure(let error):
            throw ConfigurationError("--authorized-keys", "\(error)")
        }
    }

    func run() async throws {
        // A reader of stderr that goes away (`| head`, a log shipper restarting) must not kill the broker: a failed
        // log write is an error code, never a signal. So must a file-size limit reached by the store.
        signal(SIGPIPE, SIG_IGN)
        signal(SIGXFSZ, SIG_IGN)
        // SIGHUP (a closing terminal or ssh session), SIGUSR1/2 and SIGALRM would end the process before its final
        // write; they are caught from the start and noted instead.
        let otherSignals = await UnixSignalsSequence(trapping: .sighup, .sigusr1, .sigusr2, .sigalrm)
        let configuration: BrokerConfiguration
        do {
            configuration = try self.configuration()
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
        let http = try setting(httpEndpoint, "ROLLCALL_HTTP_ENDPOINT", default: "")
        let httpAddress: (host: String, port: Int)?
        do {
            httpAddress = http.isEmpty ? nil : try OperationsServer.parse(endpoint: http)
        } catch {
            _ = fail(error)
            throw ExitCode(64)
        }
        LoggingSystem.bootstrap { label in
            var handler: any LogHandler =
                format == "json" ? JSONLogHandler(label: label) : StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "rollcall")
        // The metrics backend comes before the broker, whose metrics are made with it.
        let exporter = httpAddress.map { _ in MetricsExporter() }
        exporter?.bootstrap()
        let broker: Broker
        do {
            broker = try Broker(configuration: configuration, logger: logger)
        } catch {
            throw fail(error)
        }
        if configuration.testMode {
            logger.warning(
                "TEST MODE: the clock moves only by advance requests and nothing is kept; never run this in production")
        }
        // Started in this order and stopped in the reverse: systemd hears STOPPING first, and the HTTP endpoint
        // answers /readyz with 503 until the broker has written its last changes.
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        let bound = BoundEndpoint()
        if let httpAddress, let exporter {
            let server = OperationsServer(
                host: httpAddress.host, port: httpAddress.port, broker: broker, metrics: exporter, logger: logger
            ) { host, port in
                bound.set(host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
                logger.info("http endpoint listening", metadata: ["http": "\(host):\(port)"])
            }
            services.append(.init(service: server))
        }
        let wsBound = BoundEndpoint()
        do {
            if let server = try await WebSocketOptions.server(
                configuration, broker: broker, logger: logger, onBound: { wsBound.set($0) })
            {
                services.append(.init(service: server))
            }
        } catch {
            throw fail(error)
        }
        services.append(.init(service: broker))
        let environment = ProcessInfo.processInfo.environment
        if let notifier = SystemdNotifier(environment: environment, broker: broker, logger: logger) {
            services.append(.init(service: notifier))
        }
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            if printEndpoints {
                let waitsForHTTP = httpAddress != nil
                let waitsForWS = configuration.webSocket.endpoint != nil
                tasks.addTask {
                    while !broker.isRunning || (waitsForHTTP && bound.get() == nil)
                        || (waitsForWS && wsBound.get() == nil)
                    {
                        try await Task.sleep(for: .milliseconds(1))
                    }
                    var line = JSONWriter()
                    line.beginObject()
                    line.key("command")
                    line.string(broker.commandEndpoint)
                    line.key("update")
                    line.string(broker.updateEndpoint)
                    if let http = bound.get() {
                        line.key("http")
                        line.string(http)
                    }
                    if let ws = wsBound.get() {
                        line.key("ws")
                        line.string("\(ws)\(WebSocketServer.path)")
                    }
                    line.key("epoch")
                    line.string(broker.epoch)
                    line.key("test_mode")
                    line.bool(configuration.testMode)
                    line.endObject()
                    emit(String(decoding: line.bytes, as: UTF8.self))
                }
            }
            tasks.addTask {
                for await signal in otherSignals {
                    broker.received(signal == .sighup ? .hangup : .other("\(signal)"))
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
}

/// The HTTP endpoint's address once it listens, for --print-endpoints.
final class BoundEndpoint: Sendable {
    private let address = Mutex<String?>(nil)
    func set(_ text: String) { address.withLock { $0 = text } }
    func get() -> String? { address.withLock { $0 } }
}

/// `$XDG_STATE_HOME/rollcall`, else `~/.local/state/rollcall`: a user's state directory, by the XDG convention.
func defaultDataDirectory() -> String {
    let environment = ProcessInfo.processInfo.environment
    if let state = environment["XDG_STATE_HOME"], !state.isEmpty { return state + "/rollcall" }
    return (environment["HOME"] ?? ".") + "/.local/state/rollcall"
}
