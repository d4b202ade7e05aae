import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// Hummingbird's HTTP/1 connection setup with the operations endpoint's bounds in front: at most
/// ``OperationsSettings/maxConnections`` open (one more is accepted and closed at once: shed, so that the endpoint
/// never stops accepting), a whole request head within ``OperationsSettings/headerTimeoutMilliseconds`` of
/// connecting (``HeadDeadlineHandler``), and Hummingbird's idle timeout after that.
struct GuardedHTTPChannel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value

    let inner: HTTP1Channel
    let maxConnections: Int
    let open: ConnectionCount
    let shedWarnings: WarningClock
    let logger: Logger

    init(responder: @escaping HTTPChannelHandler.Responder, settings: OperationsSettings, logger: Logger) {
        let headerTimeout = TimeAmount.milliseconds(settings.headerTimeoutMilliseconds)
        inner = HTTP1Channel(
            responder: responder,
            configuration: .init(
                additionalChannelHandlers: [HeadDeadlineHandler(timeout: headerTimeout)],
                idleTimeout: .milliseconds(settings.idleTimeoutMilliseconds)))
        maxConnections = settings.maxConnections
        open = ConnectionCount()
        shedWarnings = WarningClock(intervalSeconds: 10)
        self.logger = logger
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard open.add() <= maxConnections else {
            open.remove()
            if shedWarnings.due() {
                self.logger.warning(
                    "http endpoint full: new connections are closed at once",
                    metadata: ["max_connections": "\(maxConnections)"])
            }
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
        channel.closeFuture.whenComplete { [open] _ in open.remove() }
        return inner.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// Closes a connection that has not sent a whole request head within `timeout` of connecting. It sits after the
/// HTTP decoder, which passes a head on only once it is whole: bytes trickled one at a time do not reset it.
final class HeadDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let timeout: TimeAmount
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func handlerAdded(context: ChannelHandlerContext) {
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { context.close(promise: nil) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) {
            timer?.cancel()
            timer = nil
        }
        context.fireChannelRead(data)
    }
}

/// Open connections of the endpoint.
final class ConnectionCount: Sendable {
    private let value = Atomic<Int>(0)
    /// Counts one more; the count after it.
    func add() -> Int { value.wrappingAdd(1, ordering: .relaxed).newValue }
    func remove() { value.wrappingSubtract(1, ordering: .relaxed) }
}

/// At most one warning per interval, from any thread.
final class WarningClock: Sendable {
    private let last = Mutex<ContinuousClock.Instant?>(nil)
    private let interval: Duration

    init(intervalSeconds: Int64) { interval = .seconds(intervalSeconds) }

    /// `true` if no warning was given within the interval (and now one is).
    func due() -> Bool {
        let now = ContinuousClock.now
        return last.withLock { last in
            if let previous = last, now - previous < interval { return false }
            last = now
            return true
        }
    }
}
