import Foundation
import Logging
import NIOCore
import NIOWebSocket
import RollCallBroker
import RollCallCore
import RollCallSecurity
import RollCallWire

/// One upgraded WebSocket connection, as a channel handler on its SwiftNIO thread: it hands each text message to the
/// event loop, writes what the loop queued for it straight into the channel, pings the peer, answers its pings and
/// close, and closes the connection when its token expires. Its end, however it comes, is a connection close for the
/// loop. It holds no task: an idle connection is this handler, its outbox and SwiftNIO's channel.
final class GatewayHandler: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// How long a connection the server closes has to answer its close frame before its TCP connection is cut.
    static let cutAfter: TimeAmount = .seconds(2)

    /// What every connection of the server shares, held once (a handler is kept per idle connection: its size
    /// counts).
    private let shared: GatewayShared
    private let grant: Grant?

    private var context: ChannelHandlerContext?
    private var outbox: GatewayOutbox?
    private var counted = false
    private var ended = false
    /// The close frame has been sent: nothing more is written.
    private var closing = false
    /// The loop has ``GatewayOutbox/maxInFlight`` of this connection's requests: no reading until it answers one.
    private var paused = false
    /// A read was asked for while paused.
    private var readWanted = false
    /// The start of a fragmented message.
    private var fragments: ByteBuffer?
    private var fragmentsAreText = false
    /// An `auth` token is being checked: later messages wait here, in order.
    private var authorizing = false
    private var held: [[UInt8]] = []
    /// A ping was sent and nothing has come from the peer since.
    private var awaitingPeer = false
    /// A pong on its way to the peer, and the payload of the latest ping that came meanwhile.
    private var pongInFlight = false
    private var nextPong: ByteBuffer?
    /// The connections of this server on this event loop (their pings, the server's stop); `nil` once ended.
    private var table: LoopConnections?
    private var timer: Scheduled<Void>?
    /// When the token expires, in seconds since 1970 (moved by `auth`).
    private var expires: Int64

    init(shared: GatewayShared, grant: Grant?) {
        self.shared = shared
        self.grant = grant
        expires = grant?.expires ?? .max
    }

    private var gateway: BrokerGateway { shared.gateway }
    private var verifier: TokenVerifier? { shared.verifier }
    private var counter: ConnectionCounter { shared.counter }
    private var logger: Logger { shared.logger }
    private var settings: WebSocketSettings { shared.gateway.configuration.webSocket }

    // MARK: Life

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        counted = true
        guard counter.add() <= settings.maxConnections else {
            sendClose(code: GatewayCloseCode.unavailable, reason: "too many connections")
            return
        }
        let sink = ChannelSink(NIOLoopBound(self, eventLoop: context.eventLoop))
        let outbox = GatewayOutbox(limitBytes: settings.sendQueueBytes, sink: sink)
        self.outbox = outbox
        gateway.open(access: grant.map { .role($0.role) } ?? .open, outbox: outbox)
        let table = shared.connections.table(on: context.eventLoop)
        guard table.add(self) else { return outbox.close(code: 1001, reason: "the broker is stopping") }
        self.table = table
        scheduleExpiry()
    }

    func handlerRemoved(context: ChannelHandlerContext) { end() }

    func channelInactive(context: ChannelHandlerContext) {
        end()
        context.fireChannelInactive()
    }

    /// The connection is over: the loop drops it (its sessions end by the close path), and nothing is kept.
    private func end() {
        guard !ended else { return }
        ended = true
        table?.remove(self)
        table = nil
        timer?.cancel()
        if counted { counter.remove() }
        if let outbox {
            outbox.finish()
            gateway.closed(outbox)
        }
        held = []
        fragments = nil
        context = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            serverStopping()
        } else if case .some(.inputClosed) = event as? ChannelEvent {
            context.close(promise: nil)  // the peer is gone; a WebSocket has no use for half a connection
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    /// A frame SwiftNIO's decoder refused (too large: 1009; malformed: 1002) is answered with a close frame, then
    /// the connection is closed; any other error closes it at once.
    /// The server is stopping: a close frame after what is queued, and the cut if the peer does not answer.
    func serverStopping() {
        guard let outbox else { return context?.close(promise: nil) ?? () }
        outbox.close(code: 1001, reason: "the broker is stopping")
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("websocket error", metadata: ["error": "\(error)"])
        guard let error = error as? NIOWebSocketError, !closing else { return context.close(promise: nil) }
        closing = true
        var data = context.channel.allocator.buffer(capacity: 2)
        data.writeInteger(error == .invalidFrameLength ? UInt16(1009) : 1002)
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)))
            .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        armCut(context)
    }

    /// Cuts the TCP connection ``cutAfter`` from now: a close frame a peer does not read (its write never completes)
    /// must not keep the connection, its slot and its sessions for ever.
    private func armCut(_ context: ChannelHandlerContext) {
        timer?.cancel()
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: Self.cutAfter) { context.close(promise: nil) }
    }

    // MARK: Reading

    func read(context: ChannelHandlerContext) {
        if paused || authorizing {
            readWanted = true
        } else {
            context.read()
        }
    }

    /// The loop answered enough of this connection's requests: read again.
    fileprivate func resumeReading() {
        paused = false
        readIfWanted()
    }

    private func readIfWanted() {
        guard readWanted, !paused, !authorizing, let context else { return }
        readWanted = false
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        awaitingPeer = false
        switch frame.opcode {
        case .text, .binary:
            guard fragments == nil else { return protocolError(1002, "a new message inside a fragmented one") }
            if frame.fin {
                received(frame.unmaskedData, text: frame.opcode == .text)
            } else {
                fragments = frame.unmaskedData
                fragmentsAreText = frame.opcode == .text
            }
        case .continuation:
            guard var message = fragments else { return protocolError(1002, "a continuation without a message") }
            var data = frame.unmaskedData
            guard message.readableBytes + data.readableBytes <= gateway.configuration.maxMessageBytes else {
                fragments = nil
                return protocolError(1009, "a message is at most \(gateway.configuration.maxMessageBytes) bytes")
            }
            message.writeBuffer(&data)
            if frame.fin {
                fragments = nil
                received(message, text: fragmentsAreText)
            } else {
                fragments = message
            }
        case .ping:
            guard !closing else { return }
            pong(frame.unmaskedData, context: context)
        case .connectionClose:
            guard !closing else { return context.close(promise: nil) }  // the answer to ours
            // The peer closes: echo its code, then close the TCP connection.
            closing = true
            var data = frame.unmaskedData
            let code = data.readInteger(as: UInt16.self) ?? 1000
            var answer = context.channel.allocator.buffer(capacity: 2)
            answer.writeInteger(code)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: answer)))
                .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            armCut(context)
        default:
            break  // pong: the peer is alive, which is all a pong says
        }
    }

    /// Answers a ping with at most one pong on its way at a time (RFC 6455 §5.5.3 lets an endpoint answer only the
    /// latest ping): a peer that sends pings and never reads makes the connection hold one pong and one payload, not
    /// one pong per ping.
    private func pong(_ payload: ByteBuffer, context: ChannelHandlerContext) {
        guard !pongInFlight else { return nextPong = payload }
        pongInFlight = true
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: payload)))
            .assumeIsolated().whenComplete { _ in
                self.pongInFlight = false
                guard let next = self.nextPong, let context = self.context, !self.closing else { return }
                self.nextPong = nil
                self.pong(next, context: context)
            }
    }

    private func received(_ message: ByteBuffer, text: Bool) {
        guard text else { return protocolError(1003, "RollCall speaks JSON in text frames") }
        handle(Array(message.readableBytesView))
    }

    /// A protocol fault: the connection is closed with `code`.
    private func protocolError(_ code: UInt16, _ reason: String) {
        guard let outbox else { return sendClose(code: code, reason: reason) }
        outbox.close(code: code, reason: reason)
    }

    /// Hands one text message to the loop (an `auth` is answered here), at most ``GatewayOutbox/maxInFlight`` at a
    /// time.
    private func handle(_ message: [UInt8]) {
        guard let outbox, !closing else { return }
        if authorizing { return held.append(message) }
        // Once the token has expired, the close is on its way: nothing more is done for it.
        if Int64(Date().timeIntervalSince1970) >= expires { return }
        if !outbox.beginRequest() { paused = true }
        let configuration = gateway.configuration
        let request = Codec.decodeGatewayRequest(
            message, limits: configuration.presence, maxTopics: configuration.webSocket.maxSubscriptions)
        guard case .success(.auth(let requestID, let token)) = request else {
            return gateway.handle(request, from: outbox)
        }
        authenticate(token, requestID: requestID, outbox: outbox)
    }

    /// `auth`: a fresh token for the same user replaces the connection's; anything else is refused and the old
    /// token stays. Messages that come meanwhile wait, so that requests keep their order.
    private func authenticate(_ token: String, requestID: JSON?, outbox: GatewayOutbox) {
        guard let verifier, let context else {
            return gateway.handle(
                .failure(
                    RequestRejection(id: requestID, error: PresenceError(.badRequest, "this endpoint takes no tokens"))
                ), from: outbox)
        }
        authorizing = true
        let checked = context.eventLoop.makePromise(of: Grant?.self)
        let logger = logger
        checked.completeWithTask {
            do {
                return try await verifier.verify(token)
            } catch {
                logger.debug("fresh token refused", metadata: ["reason": "\(error)"])
                return nil
            }
        }
        checked.futureResult.assumeIsolated().whenSuccess { fresh in
            self.authenticated(fresh, requestID: requestID, outbox: outbox)
        }
    }

    private func authenticated(_ fresh: Grant?, requestID: JSON?, outbox: GatewayOutbox) {
        authorizing = false
        guard !ended else { return }
        if let fresh, let grant, fresh.user == grant.user {
            expires = fresh.expires
            scheduleExpiry()
            gateway.reauthorize(outbox, access: .role(fresh.role), id: requestID, expires: fresh.expires)
        } else {
            let reason =
                fresh == nil
                ? "the token was refused; the old one still holds"
                : "a fresh token must be for the same user (\(grant?.user.rawValue ?? ""))"
            gateway.handle(
                .failure(RequestRejection(id: requestID, error: PresenceError(.forbidden, reason))), from: outbox)
        }
        while !authorizing, !held.isEmpty { handle(held.removeFirst()) }
        readIfWanted()
    }

    // MARK: Writing

    /// Writes what the loop queued, in order, with one flush; the outbox counts the bytes until the channel has
    /// written them to the socket.
    fileprivate func writeWaiting() {
        guard let outbox else { return }
        let frames = outbox.take()
        guard !frames.isEmpty else { return }
        let total = frames.reduce(0) { $0 + $1.count }
        guard let context, !closing else { return outbox.written(total) }
        for (index, frame) in frames.enumerated() {
            let data = context.channel.allocator.buffer(bytes: frame)
            let promise = index == frames.count - 1 ? context.eventLoop.makePromise(of: Void.self) : nil
            context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: data)), promise: promise)
            promise?.futureResult.whenComplete { _ in outbox.written(total) }
        }
        context.flush()
    }

    /// The loop closes the connection: what it queued first, then the close frame.
    fileprivate func close(code: UInt16, reason: String) {
        writeWaiting()
        sendClose(code: code, reason: reason)
    }

    /// Sends a close frame and cuts the TCP connection if the peer has not answered it within ``cutAfter``.
    private func sendClose(code: UInt16, reason: String) {
        guard let context, !closing else { return }
        closing = true
        var data = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        data.writeInteger(code)
        data.writeString(String(decoding: reason.utf8.prefix(123), as: UTF8.self))
        context.writeAndFlush(
            wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)), promise: nil)
        timer?.cancel()
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: Self.cutAfter) { context.close(promise: nil) }
    }

    // MARK: Timers

    /// Called every `--ws-ping-ms` by the loop's ``LoopConnections``: pings the peer, or cuts one that has sent
    /// nothing since the previous ping (it vanished without a FIN), so that its sessions end within twice the
    /// interval.
    func ping() {
        guard let context, !closing else { return }
        if awaitingPeer {
            logger.debug("websocket cut: no answer to a ping")
            return context.close(promise: nil)
        }
        awaitingPeer = true
        context.writeAndFlush(
            wrapOutboundOut(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer())), promise: nil)
    }

    /// Closes the connection with 4001 when its token expires without a fresh one.
    private func scheduleExpiry() {
        guard grant != nil, let context, !closing else { return }
        timer?.cancel()
        // At most a day ahead (the timer sets itself again when it fires early): an `exp` centuries away must not
        // trap the conversion to nanoseconds.
        let left = min(max(0, Double(expires) - Date().timeIntervalSince1970), 86_400)
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(Int64(left * 1e9))) {
            guard Double(self.expires) <= Date().timeIntervalSince1970 else { return self.scheduleExpiry() }
            self.outbox?.close(code: GatewayCloseCode.tokenExpired, reason: "token expired")
        }
    }
}

/// The loop's way into a ``GatewayHandler``: each call hops to the connection's SwiftNIO thread.
private final class ChannelSink: GatewayConnectionSink {
    private let handler: NIOLoopBound<GatewayHandler>

    init(_ handler: NIOLoopBound<GatewayHandler>) { self.handler = handler }

    func framesWaiting() {
        handler.eventLoop.execute { [handler] in handler.value.writeWaiting() }
    }

    func close(code: UInt16, reason: String) {
        handler.eventLoop.execute { [handler] in handler.value.close(code: code, reason: reason) }
    }

    func resumeReading() {
        handler.eventLoop.execute { [handler] in handler.value.resumeReading() }
    }
}

/// What every connection of one server shares.
final class GatewayShared: Sendable {
    let gateway: BrokerGateway
    let verifier: TokenVerifier?
    /// Upgraded connections.
    let counter: ConnectionCounter
    /// Connections accepted and not yet upgraded.
    let pending = ConnectionCounter()
    let connections: ConnectionTables
    let logger: Logger

    init(
        gateway: BrokerGateway, verifier: TokenVerifier?, counter: ConnectionCounter, connections: ConnectionTables,
        logger: Logger
    ) {
        self.gateway = gateway
        self.verifier = verifier
        self.counter = counter
        self.connections = connections
        self.logger = logger
    }
}
