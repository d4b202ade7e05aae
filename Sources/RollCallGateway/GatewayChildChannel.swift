import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOWebSocket
import RollCallBroker
import RollCallSecurity

/// How Hummingbird's server sets up each accepted connection of the WebSocket endpoint: SwiftNIO's HTTP/1 codec with
/// its WebSocket upgrader, the token checked before the upgrade, and after it one ``GatewayHandler``. The task
/// Hummingbird starts for each connection returns at once: the pipeline does the rest.
struct GatewayChildChannel: ServerChildChannel {
    struct Value: ServerChildChannelValue {
        let channel: any Channel
    }

    let shared: GatewayShared

    private var gateway: any GatewayLoop { shared.gateway }
    private var verifier: TokenVerifier? { shared.verifier }
    private var counter: ConnectionCounter { shared.counter }
    private var logger: Logger { shared.logger }

    /// Reads start with 512-byte buffers (SwiftNIO's default is 2,048), grown for larger requests: each connection
    /// keeps its last read buffer for the next read, so this is most of what an idle connection holds.
    static let receiveBuffers = AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536)

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let settings = gateway.configuration.webSocket
            guard shared.pending.add() <= settings.maxPendingUpgrades else {
                // Too many connections wait for their upgrade: this one is closed before anything is read.
                shared.pending.remove()
                logger.debug("connection closed: too many pending upgrades")
                channel.close(promise: nil)
                return Value(channel: channel)
            }
            try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: Self.receiveBuffers)
            let front = HTTPFront(timeout: .milliseconds(settings.handshakeMilliseconds), pending: shared.pending)
            let bound = NIOLoopBound(front, eventLoop: channel.eventLoop)
            let upgrader = NIOWebSocketServerUpgrader(
                maxFrameSize: gateway.configuration.maxMessageBytes,
                automaticErrorHandling: false,  // GatewayHandler answers the decoder's errors
                shouldUpgrade: { channel, head in shouldUpgrade(channel, head, front: bound) },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        let front = bound.value
                        channel.pipeline.syncOperations.removeHandler(front, promise: nil)
                        try channel.pipeline.syncOperations.addHandler(
                            GatewayHandler(shared: shared, grant: front.grant))
                    }
                })
            try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                withPipeliningAssistance: false,
                withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }),
                withErrorHandling: true)
            try channel.pipeline.syncOperations.addHandler(front)
            return Value(channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {}

    /// Upgrades a request for ``WebSocketServer/path`` while the server has room and, with tokens, once the token
    /// checks out; otherwise the request goes on to ``HTTPFront``, which answers it (401 with nothing else learned,
    /// 503, 404, 426).
    private func shouldUpgrade(
        _ channel: any Channel, _ head: HTTPRequestHead, front: NIOLoopBound<HTTPFront>
    ) -> EventLoopFuture<HTTPHeaders?> {
        guard URI(head.uri).path == WebSocketServer.path else { return channel.eventLoop.makeSucceededFuture(nil) }
        guard counter.count < gateway.configuration.webSocket.maxConnections else {
            front.value.refusal = .serviceUnavailable
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        guard let verifier else { return channel.eventLoop.makeSucceededFuture(HTTPHeaders()) }
        guard let token = WebSocketServer.token(of: head) else {
            front.value.refusal = .unauthorized
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        let checked = channel.eventLoop.makePromise(of: Grant?.self)
        let logger = logger
        let now = Double(shared.wallClock()) / 1_000
        checked.completeWithTask {
            do {
                return try await verifier.verify(token, now: now)
            } catch {
                // Nothing more is said to the client than 401.
                logger.debug("token refused", metadata: ["reason": "\(error)"])
                return nil
            }
        }
        return checked.futureResult.map { grant in
            guard let grant else {
                front.value.refusal = .unauthorized
                return nil
            }
            front.value.grant = grant
            return HTTPHeaders()
        }
    }
}

/// The HTTP side of a connection until its upgrade: answers every request that is not upgraded and closes the
/// connection, and closes a connection that has not been upgraded within the handshake bound
/// (`--ws-handshake-timeout-ms`), so that a client that sends nothing, or half a request, holds nothing for long.
final class HTTPFront: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let timeout: TimeAmount
    /// Counts this connection while it waits for its upgrade.
    private let pending: ConnectionCounter
    private var timer: Scheduled<Void>?
    private var answered = false
    /// Why the upgrade was refused, if it was.
    var refusal: HTTPResponseStatus?
    /// The checked token's grant, for the upgraded connection.
    var grant: Grant?

    init(timeout: TimeAmount, pending: ConnectionCounter) {
        self.timeout = timeout
        self.pending = pending
    }

    func handlerAdded(context: ChannelHandlerContext) {
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { context.close(promise: nil) }
    }

    /// Upgraded, or closed: either way no longer pending.
    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        pending.remove()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent { return context.close(promise: nil) }  // stopping, not upgraded yet
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data), !answered else { return }
        answered = true
        let status =
            refusal ?? (URI(head.uri).path == WebSocketServer.path ? .upgradeRequired : .notFound)
        var headers: HTTPHeaders = ["Connection": "close", "Content-Length": "0"]
        if status == .unauthorized { headers.add(name: "WWW-Authenticate", value: "Bearer") }
        if status == .upgradeRequired { headers.add(name: "Upgrade", value: "websocket") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }
}
