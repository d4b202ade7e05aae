import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import RollCallBroker
import RollCallCore
import RollCallWire
import ServiceLifecycle
import Synchronization

/// The operator's HTTP endpoint: Prometheus metrics, health and readiness, and a live status page, on Hummingbird.
/// It runs on its own threads (SwiftNIO's) and never touches the broker's core: what it shows comes from the
/// metrics registry, from atomics, or from the event loop through ``Broker/status(timeout:)`` and
/// ``Broker/lookUp(_:timeout:)``.
public struct OperationsServer: Service {
    /// `GET /healthz` answers 503 once the loop has not finished a round for this long.
    public static let stallMilliseconds: Int64 = 2_000

    private let application: Application<RouterResponder<BasicRequestContext>>
    private let bound: BoundAddress

    /// An endpoint on `settings.endpoint` (port 0 for a free one, reported through `onBound`), with its header and
    /// idle timeouts and its connection cap. `webhooks` reads the webhook URLs' delivery for the status page.
    public init(
        settings: OperationsSettings, broker: Broker, metrics: MetricsExporter, logger: Logger,
        webhooks: @escaping @Sendable () -> [WebhookRow] = { [] },
        onBound: @escaping @Sendable (String, Int) -> Void = { _, _ in }
    ) throws(ConfigurationError) {
        let (host, port) = try settings.validated()
        let router = Router()
        router.get("/metrics") { _, _ -> Response in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: metrics.scrape())))
        }
        router.get("/healthz") { _, _ -> Response in
            switch broker.millisecondsSinceLastRound {
            case let since? where since <= Self.stallMilliseconds:
                return text(.ok, "ok: the event loop finished a round \(since) ms ago")
            case let since?:
                return text(.serviceUnavailable, "stalled: the event loop last finished a round \(since) ms ago")
            case nil:
                return text(.serviceUnavailable, "starting: the event loop has not turned yet")
            }
        }
        router.get("/readyz") { _, _ -> Response in
            if broker.isStopping { return text(.serviceUnavailable, "stopping: shutdown has begun") }
            guard broker.isRunning else { return text(.serviceUnavailable, "starting: state not restored yet") }
            if let cluster = broker.cluster, cluster.state != .live {
                return text(
                    .serviceUnavailable,
                    "\(cluster.state.rawValue): cluster node \(cluster.node) cannot vouch for the cluster's state now")
            }
            return text(.ok, "ready: state restored, \(broker.commandEndpoint) and \(broker.updateEndpoint) bound")
        }
        router.get("/") { _, _ -> Response in
            Response(
                status: .ok, headers: [.contentType: "text/html; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: StatusPage.html)))
        }
        router.get("/api/status") { _, _ -> Response in
            guard let status = await broker.status() else {
                return text(.serviceUnavailable, "the event loop did not answer")
            }
            return json(StatusJSON.encode(status, webhooks: webhooks()))
        }
        router.get("/api/users/:user") { _, context -> Response in
            let text = context.parameters.get("user") ?? ""
            guard let user = UserID(validating: text) else {
                return Hummingbird.Response(
                    status: .badRequest, headers: [.contentType: "text/plain"],
                    body: .init(
                        byteBuffer: ByteBuffer(string: "invalid user id: 1 to 128 bytes of A-Z a-z 0-9 . _ @ + -\n")))
            }
            guard let view = await broker.lookUp(user) else {
                return Hummingbird.Response(
                    status: .serviceUnavailable, headers: [.contentType: "text/plain"],
                    body: .init(byteBuffer: ByteBuffer(string: "the event loop did not answer\n")))
            }
            return json(StatusJSON.encode(view))
        }
        let bound = BoundAddress()
        self.bound = bound
        application = Application(
            router: router,
            server: HTTPServerBuilder { responder in
                GuardedHTTPChannel(responder: responder, settings: settings, logger: logger)
            },
            configuration: .init(address: .hostname(host, port: port), serverName: "rollcall"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? port
                bound.set(host: host, port: port)
                onBound(host, port)
            },
            logger: logger)
    }

    public func run() async throws { try await application.run() }

    /// `host:port` once the server listens.
    public var address: (host: String, port: Int)? { bound.get() }
}

private func text(_ status: HTTPResponse.Status, _ line: String) -> Response {
    Response(
        status: status, headers: [.contentType: "text/plain; charset=utf-8"],
        body: .init(byteBuffer: ByteBuffer(string: line + "\n")))
}

private func json(_ bytes: [UInt8]) -> Response {
    Response(
        status: .ok, headers: [.contentType: "application/json", .cacheControl: "no-store"],
        body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
}

/// Where the server listens, once it does.
private final class BoundAddress: Sendable {
    private let address = Mutex<(host: String, port: Int)?>(nil)
    func set(host: String, port: Int) { address.withLock { $0 = (host, port) } }
    func get() -> (host: String, port: Int)? { address.withLock { $0 } }
}
