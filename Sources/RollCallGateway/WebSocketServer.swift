import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOCore
import RollCallBroker
import RollCallSecurity
import ServiceLifecycle
import Synchronization

/// The WebSocket front door (docs/websocket.md): `GET /v1/ws`, upgraded to a WebSocket once the token checks out,
/// on Hummingbird and hummingbird-websocket, the HTTP stack the operations endpoint already uses. It runs on
/// SwiftNIO's threads and never touches the core: every frame goes to the event loop through ``BrokerGateway``,
/// and replies and updates come back through each connection's ``GatewayOutbox``.
public struct WebSocketServer: Service {
    /// The path WebSocket clients connect to.
    public static let path = "/v1/ws"

    private let application: Application<RouterResponder<GatewayRequestContext>>
    private let bound: BoundPort

    /// A server on `host:port` (port 0 for a free one, reported through `onBound`); `verifier` `nil` accepts
    /// every peer without a token, with every right (loopback only, unless `--insecure`).
    ///
    /// With `tls` the endpoint speaks TLS only (`wss://`).
    public init(
        host: String, port: Int, gateway: BrokerGateway, verifier: TokenVerifier?, tls: TLSConfiguration? = nil,
        logger: Logger, onBound: @escaping @Sendable (String, Int) -> Void = { _, _ in }
    ) throws {
        let settings = gateway.configuration.webSocket
        let counter = ConnectionCounter()
        let router = Router(context: GatewayRequestContext.self)
        router.ws(
            RouterPath(Self.path),
            shouldUpgrade: { request, context in
                guard counter.count < settings.maxConnections else {
                    UpgradeRefusal.refuse(context.channel, status: 503, reason: "Service Unavailable")
                    return .dontUpgrade
                }
                guard let verifier else { return .upgrade([:]) }
                do {
                    guard let token = Self.token(of: request) else {
                        throw TokenVerifier.Refusal(description: "no token")
                    }
                    context.grant.set(try await verifier.verify(token))
                } catch {
                    // Nothing more is said to the client than 401.
                    context.logger.debug("token refused", metadata: ["reason": "\(error)"])
                    UpgradeRefusal.refuse(
                        context.channel, status: 401, reason: "Unauthorized", extraHeader: "WWW-Authenticate: Bearer")
                    return .dontUpgrade
                }
                return .upgrade([:])
            },
            onUpgrade: { inbound, outbound, context in
                let connection = GatewayConnection(
                    gateway: gateway, verifier: verifier, grant: context.requestContext.grant.get(),
                    channel: context.requestContext.channel, logger: logger, counter: counter)
                try await connection.run(inbound: inbound, outbound: outbound)
            })
        let bound = BoundPort()
        self.bound = bound
        let maxFrame = gateway.configuration.maxMessageBytes
        let webSocket = HTTPServerBuilder.http1WebSocketUpgrade(
            webSocketRouter: router,
            configuration: .init(
                http1: .init(idleTimeout: .seconds(30)),
                ws: .init(
                    maxFrameSize: maxFrame,
                    autoPing: .enabled(timePeriod: .milliseconds(settings.pingMilliseconds)),
                    closeTimeout: .seconds(2))))
        application = Application(
            router: Router(context: GatewayRequestContext.self),
            server: try tls.map { try .tls(webSocket, tlsConfiguration: $0) } ?? webSocket,
            configuration: .init(address: .hostname(host, port: port), serverName: "rollcall"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? port
                bound.set(port)
                onBound(host, port)
            },
            logger: logger)
    }

    public func run() async throws { try await application.run() }

    /// The port the server listens on, once it does.
    public var port: Int? { bound.get() }

    /// The token of an upgrade request: `Authorization: Bearer <token>`, else `?token=<token>` (browsers cannot set
    /// headers on a WebSocket).
    static func token(of request: Request) -> String? {
        if let header = request.headers[.authorization], header.hasPrefix("Bearer ") {
            return String(header.dropFirst("Bearer ".count))
        }
        return request.uri.queryParameters.get("token")
    }
}

/// The request context of the WebSocket endpoint: the channel (to cut a connection that does not read) and the
/// grant of the token checked before the upgrade.
public struct GatewayRequestContext: RequestContext, WebSocketRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let webSocket: WebSocketHandlerReference<Self>
    let channel: any Channel
    let grant: GrantBox

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        webSocket = .init()
        channel = source.channel
        grant = GrantBox()
    }
}

/// Carries the grant from the upgrade check to the connection.
final class GrantBox: Sendable {
    private let grant = Mutex<Grant?>(nil)
    func set(_ value: Grant) { grant.withLock { $0 = value } }
    func get() -> Grant? { grant.withLock { $0 } }
}

/// Open WebSocket connections.
final class ConnectionCounter: Sendable {
    private let value = Atomic<Int>(0)
    var count: Int { value.load(ordering: .relaxed) }
    /// Counts one more; the count after it.
    func add() -> Int { value.wrappingAdd(1, ordering: .relaxed).newValue }
    func remove() { value.wrappingSubtract(1, ordering: .relaxed) }
}

/// Where the server listens, once it does.
private final class BoundPort: Sendable {
    private let port = Mutex<Int?>(nil)
    func set(_ value: Int) { port.withLock { $0 = value } }
    func get() -> Int? { port.withLock { $0 } }
}

extension WebSocketServer {
    /// A server TLS configuration from a PEM certificate chain and a PEM private key.
    public static func tlsConfiguration(certificateFile: String, keyFile: String) throws -> TLSConfiguration {
        let chain = try NIOSSLCertificate.fromPEMFile(certificateFile)
        guard !chain.isEmpty else {
            throw TokenVerifier.KeyFileError(description: "no certificate in \(certificateFile)")
        }
        return TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: keyFile, format: .pem)))
    }
}
