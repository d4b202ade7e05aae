import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import RollCallBroker
import RollCallSecurity
import ServiceLifecycle
import Synchronization

/// The WebSocket front door (docs/websocket.md): `GET /v1/ws`, upgraded to a WebSocket once the token checks out.
///
/// It runs on Hummingbird's HTTP server (the stack the operations endpoint uses) with SwiftNIO's HTTP/1 codec and
/// WebSocket upgrader and codec, and one channel handler per connection (``GatewayHandler``): no task and no async
/// channel per connection, so that an idle connection costs a few KB. It never touches the core: every frame goes to
/// the event loop through ``BrokerGateway``, and replies and updates come back through each connection's
/// ``GatewayOutbox`` straight into its channel.
public struct WebSocketServer: Service {
    /// The path WebSocket clients connect to.
    public static let path = "/v1/ws"

    private let server: any Service
    private let bound: BoundPort
    private let connections: ConnectionTables

    /// A server on `host:port` (port 0 for a free one, reported through `onBound`); `verifier` `nil` accepts
    /// every peer without a token, with every right (loopback only, unless `--insecure`).
    ///
    /// With `tls` the endpoint speaks TLS only (`wss://`).
    public init(
        host: String, port: Int, gateway: BrokerGateway, verifier: TokenVerifier?, tls: TLSConfiguration? = nil,
        logger: Logger, onBound: @escaping @Sendable (String, Int) -> Void = { _, _ in }
    ) throws {
        let bound = BoundPort()
        let connections = ConnectionTables(
            interval: .milliseconds(gateway.configuration.webSocket.pingMilliseconds), testClock: gateway.testClock)
        self.bound = bound
        self.connections = connections
        verifier?.onKeysRevoked { [connections] revoked in connections.revoke(revoked) }
        let child = GatewayChildChannel(
            shared: GatewayShared(
                gateway: gateway, verifier: verifier, counter: ConnectionCounter(), connections: connections,
                logger: logger))
        let configuration = ServerConfiguration(address: .hostname(host, port: port), serverName: "rollcall")
        let onServerRunning: @Sendable (any Channel) async -> Void = { channel in
            let port = channel.localAddress?.port ?? port
            bound.set(port)
            onBound(host, port)
        }
        if let tls {
            server = Server(
                childChannelSetup: try TLSChannel(child, tlsConfiguration: tls), configuration: configuration,
                onServerRunning: onServerRunning, eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
                logger: logger)
        } else {
            server = Server(
                childChannelSetup: child, configuration: configuration, onServerRunning: onServerRunning,
                eventLoopGroup: MultiThreadedEventLoopGroup.singleton, logger: logger)
        }
    }

    /// Serves until cancelled or shut down; its connections are then closed (1001), and cut if they do not answer
    /// within ``GatewayHandler/cutAfter``.
    public func run() async throws {
        // A graceful shutdown reaches each connection as SwiftNIO's quiesce event (the server waits for them);
        // cancelling the task closes what is left. A connection not yet upgraded goes at its handshake bound.
        defer { connections.stopAll() }
        try await withTaskCancellationHandler {
            try await server.run()
        } onCancel: {
            connections.stopAll()
        }
    }

    /// The port the server listens on, once it does.
    public var port: Int? { bound.get() }

    /// The token of an upgrade request: `Authorization: Bearer <token>`, else `?token=<token>` (browsers cannot set
    /// headers on a WebSocket).
    static func token(of head: HTTPRequestHead) -> String? {
        if let header = head.headers.first(name: "authorization"), header.hasPrefix("Bearer ") {
            return String(header.dropFirst("Bearer ".count))
        }
        return URI(head.uri).queryParameters["token"].map(String.init)
    }
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
