import Logging
import RollCallBroker
import RollCallGateway
import RollCallOperations
import RollCallWebhooks
import ServiceLifecycle
import Synchronization
import UnixSignals

/// The product, assembled: one validated ``ServerConfiguration`` turned into its running services, in their
/// dependency order. `rollcall serve` and `RollCallTestKit` both start a server through it, so a test starts the very
/// broker, WebSocket door and operations endpoint that ship.
///
/// The services run in one `ServiceGroup` in this order: the operations endpoint, the JWKS URL's refresher, the
/// WebSocket door, the broker (and with it the cluster node it runs), webhook delivery, systemd's notifier, the
/// descriptor watch. They stop in the reverse (webhook delivery sends nothing new once the stop begins): systemd
/// hears `STOPPING` first, the broker writes its last changes while the door and the endpoint still answer (the
/// endpoint's `/readyz` says 503 from the start of the shutdown), and the operations endpoint goes last.
public final class RollCallServer: Sendable {
    public let configuration: ServerConfiguration
    public let broker: Broker
    public let webSocket: WebSocketServer?
    public let operations: OperationsServer?
    /// The WebSocket door's token checks, if it takes tokens.
    public let verifier: TokenVerifier?
    /// Webhook delivery (docs/webhooks.md), with `--webhook-url`.
    public let webhooks: WebhookDelivery?
    private let services: [any Service]
    private let bound: BoundAddresses

    /// Builds every service: the broker binds its endpoints here (a bad endpoint fails now, with a clear error), the
    /// WebSocket door reads its token key and TLS files. Nothing runs until ``run(gracefulShutdownSignals:)``.
    ///
    /// `metrics` is the Prometheus registry the executable bootstrapped swift-metrics with, for `/metrics`; without
    /// one, the operations endpoint serves a registry of its own (the process metrics only). `environment` is read
    /// for systemd's `NOTIFY_SOCKET` and `WATCHDOG_USEC`.
    public init(
        _ configuration: ServerConfiguration, logger: Logger, metrics: MetricsExporter? = nil,
        environment: [String: String] = [:]
    ) async throws {
        try configuration.validate()
        self.configuration = configuration
        // Every connection of every endpoint is a descriptor: the soft limit (often 1,024) is raised to the hard one
        // before anything binds, so that a flood of connections meets the endpoints' own caps first.
        if let limit = DescriptorLimit.raiseToHard() {
            logger.debug("file descriptor limit", metadata: ["limit": "\(limit)"])
        }
        let wakeUp = WebhookWakeUp()
        let broker = try Broker(configuration: configuration.broker, logger: logger) { _ in wakeUp.notify() }
        self.broker = broker
        let bound = BoundAddresses()
        self.bound = bound
        var services: [any Service] = []
        let webhooks = try configuration.webhooks.map {
            try wakeUp.start(
                $0, broker: broker, cluster: configuration.broker.cluster,
                writeInterval: configuration.broker.writeIntervalMilliseconds, logger: logger)
        }
        self.webhooks = webhooks
        if let settings = configuration.operations {
            let server = try OperationsServer(
                settings: settings, broker: broker, metrics: metrics ?? MetricsExporter(), logger: logger,
                webhooks: { webhooks?.states.map(WebhookRow.init) ?? [] }
            ) { host, port in
                let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
                bound.state.withLock { $0.operations = address }
                logger.info("http endpoint listening", metadata: ["http": "\(address)"])
            }
            operations = server
            services.append(server)
        } else {
            operations = nil
        }
        let verifier = try await Self.tokenVerifier(configuration.broker.webSocket, logger: logger)
        self.verifier = verifier
        webSocket = try await Self.webSocketServer(
            configuration.broker, broker: broker, verifier: verifier, logger: logger
        ) { url in
            bound.state.withLock { $0.webSocket = url }
        }
        if let source = verifier?.jwksSource { services.append(source) }
        if let webSocket { services.append(webSocket) }
        services.append(broker)
        if let webhooks { services.append(webhooks) }
        if let notifier = SystemdNotifier(environment: environment, broker: broker, logger: logger) {
            services.append(notifier)
        }
        services.append(DescriptorWatch(logger: logger))
        self.services = services
    }

    /// The services in start order.
    public var serviceConfigurations: [ServiceGroupConfiguration.ServiceConfiguration] {
        services.map { .init(service: $0) }
    }

    /// A group that runs the services; `gracefulShutdownSignals` start a graceful shutdown (none in tests: they
    /// call `triggerGracefulShutdown()`).
    public func serviceGroup(gracefulShutdownSignals: [UnixSignal] = [], logger: Logger) -> ServiceGroup {
        ServiceGroup(
            configuration: .init(
                services: serviceConfigurations, gracefulShutdownSignals: gracefulShutdownSignals, logger: logger))
    }

    /// `ws://HOST:PORT` or `wss://HOST:PORT` once the WebSocket door listens (its path is ``WebSocketServer/path``).
    public var webSocketAddress: String? { bound.state.withLock { $0.webSocket } }

    /// `HOST:PORT` once the operations endpoint listens.
    public var operationsAddress: String? { bound.state.withLock { $0.operations } }

    /// A signal that is not a request to stop. SIGHUP re-reads `--jwt-key-file` and fetches the JWKS URL's keys
    /// again (a file that cannot be used keeps the old keys, logged), then goes to the broker, which reloads the
    /// authorized-keys file with CURVE and the contacts file with `--contacts-file`. Safe from any task.
    public func received(_ signal: Broker.Signal) async {
        if signal == .hangup, let verifier {
            await verifier.reloadKeyFile()
            await verifier.jwksSource?.refreshNow()
            // Without CURVE or a contacts file the broker would log that nothing was reloaded.
            guard configuration.broker.curve != nil || configuration.broker.contactsFile != nil else { return }
        }
        broker.received(signal)
    }

    /// The token checks the WebSocket door's settings ask for, if any: the key file read and the JWKS URL's first
    /// fetch made now, so that a key that cannot be used stops the start.
    private static func tokenVerifier(_ settings: WebSocketSettings, logger: Logger) async throws -> TokenVerifier? {
        guard settings.endpoint != nil, settings.jwtKeyFile != nil || settings.jwtJwksURL != nil else { return nil }
        var source: JWKSSource?
        if let url = settings.jwtJwksURL {
            let jwks = JWKSSource(url: url, logger: logger)
            try await jwks.start()
            source = jwks
        }
        return try await TokenVerifier(
            keyFile: settings.jwtKeyFile, jwks: source,
            rules: .init(
                issuer: settings.jwtIssuer, audience: settings.jwtAudience,
                maxLifetimeSeconds: settings.jwtMaxLifetimeSeconds),
            logger: logger)
    }

    /// The WebSocket door the configuration asks for, if any; `onBound` hears its `ws[s]://HOST:PORT` once it listens.
    private static func webSocketServer(
        _ configuration: BrokerConfiguration, broker: Broker, verifier: TokenVerifier?, logger: Logger,
        onBound: @escaping @Sendable (String) -> Void
    ) async throws -> WebSocketServer? {
        let settings = configuration.webSocket
        guard let endpoint = settings.endpoint else { return nil }
        let (host, port) = try WebSocketSettings.parse(endpoint: endpoint)
        let tokens = verifier != nil
        let tls = try settings.tlsCertFile.map {
            try WebSocketServer.tlsConfiguration(certificateFile: $0, keyFile: settings.tlsKeyFile ?? "")
        }
        let scheme = tls == nil ? "ws" : "wss"
        return try WebSocketServer(
            host: host, port: port, gateway: broker.gateway, verifier: verifier, tls: tls, logger: logger
        ) { host, port in
            let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            logger.info(
                "websocket endpoint listening",
                metadata: ["ws": "\(scheme)://\(address)\(WebSocketServer.path)", "tokens": "\(tokens)"])
            onBound("\(scheme)://\(address)")
        }
    }
}

/// Where the door and the endpoint listen, once they do.
private final class BoundAddresses: Sendable {
    let state = Mutex<(webSocket: String?, operations: String?)>((nil, nil))
}

extension WebhookRow {
    init(_ state: WebhookDelivery.URLState) {
        let type: String
        switch state.stream {
        case .changes: type = "presence.changed"
        case .offlineFor: type = "presence.offline_for"
        }
        self.init(
            url: state.url, type: type, acknowledged: state.acknowledged, pending: state.pending,
            deliveredBatches: state.deliveredBatches, skippedBatches: state.skippedBatches,
            trimmedGaps: state.trimmedGaps, failures: state.failures, lastError: state.lastError,
            delivering: state.delivering, holder: state.holder)
    }
}
