import Logging
import NIOCore
import NIOWebSocket
import RollCallBroker
import RollCallCore
import RollCallSecurity
import RollCallWire

/// One upgraded WebSocket connection, as a channel handler on its SwiftNIO thread: a shell that feeds what happens
/// to its ``StateMachine`` and carries out what the machine decides. It hands each text message to the event loop,
/// writes what the loop queued for it straight into the channel, pings the peer, answers its pings and close, and
/// closes the connection when its token expires. Its end, however it comes, is a connection close for the loop. It
/// holds no task: an idle connection is this handler, its outbox and SwiftNIO's channel.
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
    /// The key (the key file's or the JWKS URL's) that checked the token now in force (the upgrade's, or the latest
    /// `auth`'s).
    private var tokenKey: TokenKeyRef?
    private var machine: StateMachine

    private var context: ChannelHandlerContext?
    private var outbox: GatewayOutbox?
    private var counted = false
    /// The connections of this server on this event loop (their pings, the server's stop); `nil` once ended.
    private var table: LoopConnections?
    /// The token's expiry, or the cut after a close frame.
    private var timer: Scheduled<Void>?

    init(shared: GatewayShared, grant: Grant?) {
        self.shared = shared
        self.grant = grant
        tokenKey = grant?.key
        let configuration = shared.gateway.configuration
        machine = StateMachine(
            limits: .init(
                maxConnections: configuration.webSocket.maxConnections,
                maxMessageBytes: configuration.maxMessageBytes, presence: configuration.presence,
                maxTopics: configuration.webSocket.maxSubscriptions, takesTokens: shared.verifier != nil),
            grant: grant)
    }

    private var gateway: any GatewayLoop { shared.gateway }
    private var logger: Logger { shared.logger }
    private var now: Int64 { shared.wallClock() }

    // MARK: Life

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        counted = true
        switch machine.upgraded(connections: shared.counter.add()) {
        case .refuse(let code, let reason):
            sendClose(code: code, reason: reason, context: context)
        case .open:
            let sink = ChannelSink(NIOLoopBound(self, eventLoop: context.eventLoop))
            let outbox = GatewayOutbox(limitBytes: gateway.configuration.webSocket.sendQueueBytes, sink: sink)
            self.outbox = outbox
            gateway.open(access: grant.map { .role($0.role) } ?? .open, outbox: outbox)
            let table = shared.connections.table(on: context.eventLoop)
            guard table.add(self) else { return serverStopping() }
            self.table = table
            revokeIfKeyGone()
            scheduleExpiry(machine.expiry(now: now))
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) { end() }

    func channelInactive(context: ChannelHandlerContext) {
        end()
        context.fireChannelInactive()
    }

    /// The connection is over: the loop drops it (its sessions end by the close path), and nothing is kept.
    private func end() {
        guard machine.ended() else { return }
        table?.remove(self)
        table = nil
        timer?.cancel()
        if counted { shared.counter.remove() }
        if let outbox {
            outbox.finish()
            gateway.closed(outbox)
        }
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

    /// The server is stopping: a close frame after what is queued, and the cut if the peer does not answer.
    func serverStopping() {
        switch machine.serverStopping() {
        case .closeThroughLoop(let code, let reason): outbox?.close(code: code, reason: reason)
        case .closeConnection: context?.close(promise: nil)
        case .none: break
        }
    }

    /// A reload of the key file, or a good fetch of the JWKS URL, took `revoked` away: if one of them checked this
    /// connection's token, the loop ends its sessions (reason `revoked`) and closes it with 4003.
    func revoke(_ revoked: RevokedKeys) {
        guard revoked.covers(tokenKey), machine.revoked(), let outbox else { return }
        gateway.revoke(outbox)
    }

    /// A token checked just before a reload (or a JWKS fetch) took its key away may reach the connection after its
    /// ``revoke(_:)`` went round (an upgrade, or an `auth`, under way): the key is looked up again once the token is
    /// in force, and if it went, the connection goes as a revoked one does.
    private func revokeIfKeyGone() {
        guard let verifier = shared.verifier, !verifier.stillHolds(tokenKey), machine.revoked(), let outbox else {
            return
        }
        gateway.revoke(outbox)
    }

    /// A frame SwiftNIO's decoder refused (too large: 1009; malformed: 1002) is answered with a close frame, then
    /// the connection is closed; any other error closes it at once.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("websocket error", metadata: ["error": "\(error)"])
        guard let error = error as? NIOWebSocketError else { return context.close(promise: nil) }
        switch machine.decoderFailed(tooLarge: error == .invalidFrameLength) {
        case .closeWith(let code): closeAfter(code: code, context: context)
        case .closeConnection: context.close(promise: nil)
        }
    }

    // MARK: Reading

    func read(context: ChannelHandlerContext) {
        if machine.readWanted() { context.read() }
    }

    /// The loop answered enough of this connection's requests: read again.
    fileprivate func resumeReading() {
        if machine.requestsAnswered() { context?.read() }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch machine.frame(unwrapInboundIn(data), now: now) {
        case .none: break
        case .message(let action): carryOut(action)
        case .pong(let payload): pong(payload, context: context)
        case .fail(let code, let reason): outbox?.close(code: code, reason: reason)
        case .answerClose(let code): closeAfter(code: code, context: context)
        case .closeConnection: context.close(promise: nil)
        }
    }

    /// Writes a pong; once it is written, the one for a ping that came meanwhile.
    private func pong(_ payload: ByteBuffer, context: ChannelHandlerContext) {
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: payload)))
            .assumeIsolated().whenComplete { _ in
                guard let next = self.machine.pongWritten(), let context = self.context else { return }
                self.pong(next, context: context)
            }
    }

    /// Hands one message to the loop, at most ``GatewayOutbox/maxInFlight`` at a time; an `auth` is checked here.
    private func carryOut(_ action: StateMachine.MessageAction) {
        guard let outbox else { return }
        switch action {
        case .nothing: return
        case .forward(let request):
            machine.requestCounted(full: !outbox.beginRequest())
            gateway.handle(request, from: outbox)
        case .authenticate(let token, _):
            machine.requestCounted(full: !outbox.beginRequest())
            authenticate(token)
        }
    }

    /// `auth`: the token is checked off the channel's thread; messages that come meanwhile wait in the machine, so
    /// that requests keep their order.
    private func authenticate(_ token: String) {
        guard let verifier = shared.verifier, let context else { return }
        let checked = context.eventLoop.makePromise(of: Grant?.self)
        let logger = logger
        let now = Double(self.now) / 1_000
        checked.completeWithTask {
            do {
                return try await verifier.verify(token, now: now)
            } catch {
                logger.debug("fresh token refused", metadata: ["reason": "\(error)"])
                return nil
            }
        }
        checked.futureResult.assumeIsolated().whenSuccess { fresh in self.tokenChecked(fresh) }
    }

    /// A fresh token for the same user replaces the connection's; anything else is refused and the old token stays.
    private func tokenChecked(_ fresh: Grant?) {
        guard let outbox else { return }
        switch machine.tokenChecked(fresh, now: now) {
        case .none: return
        case .reauthorize(let fresh, let requestID):
            tokenKey = fresh.key
            scheduleExpiry(machine.expiry(now: now))
            gateway.reauthorize(outbox, access: .role(fresh.role), id: requestID, expires: fresh.expires)
            revokeIfKeyGone()
        case .refuse(let reason, let requestID):
            gateway.handle(
                .failure(RequestRejection(id: requestID, error: PresenceError(.forbidden, reason))), from: outbox)
        }
        while let held = machine.nextHeld(now: now) { carryOut(held) }
        if machine.resumeAfterHeld() { context?.read() }
    }

    // MARK: Writing

    /// Writes what the loop queued, in order, with one flush; the outbox counts the bytes until the channel has
    /// written them to the socket.
    fileprivate func writeWaiting() {
        guard let outbox else { return }
        let frames = outbox.take()
        guard !frames.isEmpty else { return }
        let total = frames.reduce(0) { $0 + $1.count }
        guard let context, machine.writes else { return outbox.written(total) }
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
        guard let context, case .sendClose(let code, let reason) = machine.loopCloses(code: code, reason: reason)
        else { return }
        sendClose(code: code, reason: reason, context: context)
    }

    /// Sends a close frame and cuts the TCP connection if the peer has not answered it within ``cutAfter``.
    private func sendClose(code: UInt16, reason: String, context: ChannelHandlerContext) {
        var data = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        data.writeInteger(code)
        data.writeString(String(decoding: reason.utf8.prefix(123), as: UTF8.self))
        context.writeAndFlush(
            wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)), promise: nil)
        armCut(context)
    }

    /// Sends a close frame with `code` and closes the TCP connection once it is written (or at the cut).
    private func closeAfter(code: UInt16, context: ChannelHandlerContext) {
        var data = context.channel.allocator.buffer(capacity: 2)
        data.writeInteger(code)
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

    // MARK: Timers

    /// Called every `--ws-ping-ms` by the loop's ``LoopConnections``: pings the peer, or cuts one that has sent
    /// nothing since the previous ping (it vanished without a FIN), so that its sessions end within twice the
    /// interval.
    func ping() {
        guard let context else { return }
        switch machine.pingDue() {
        case .ping:
            context.writeAndFlush(
                wrapOutboundOut(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer())), promise: nil)
        case .cut:
            logger.debug("websocket cut: no answer to a ping")
            context.close(promise: nil)
        case .none: break
        }
    }

    /// Looks at the token's expiry again when the machine says.
    private func scheduleExpiry(_ action: StateMachine.ExpiryAction) {
        switch action {
        case .none: return
        case .close(let code, let reason): outbox?.close(code: code, reason: reason)
        case .wait(let milliseconds):
            guard let context else { return }
            timer?.cancel()
            timer = context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(milliseconds)) {
                self.scheduleExpiry(self.machine.expiryDue(now: self.now))
            }
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
