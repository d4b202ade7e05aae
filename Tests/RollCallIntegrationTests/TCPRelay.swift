import NIOCore
import NIOPosix
import Synchronization

/// A TCP relay on a free loopback port to `127.0.0.1:target`: the network between a phone and the broker, which a
/// test cuts (every relayed connection closed, new ones refused) and brings back.
final class TCPRelay: Sendable {
    let port: Int
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private let server: any Channel
    private let state = State()

    /// Whether the network is up, and the relayed connections' channels (both sides).
    private final class State: Sendable {
        let value = Mutex<(up: Bool, open: [any Channel])>((true, []))
        func withLock<T>(_ body: (inout (up: Bool, open: [any Channel])) -> T) -> T { value.withLock { body(&$0) } }
    }

    init(to target: Int) throws {
        let state = state
        server = try ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                guard state.withLock({ $0.up }) else { return inbound.close() }
                let outbound = ClientBootstrap(group: inbound.eventLoop)
                    .channelInitializer { outbound in
                        outbound.eventLoop.makeCompletedFuture {
                            try outbound.pipeline.syncOperations.addHandler(
                                Pipe(to: inbound.eventLoop.makeSucceededFuture(inbound)))
                        }
                    }
                    .connect(host: "127.0.0.1", port: target)
                outbound.whenSuccess { outbound in state.withLock { $0.open += [inbound, outbound] } }
                outbound.whenFailure { _ in inbound.close(promise: nil) }
                return inbound.eventLoop.makeCompletedFuture {
                    try inbound.pipeline.syncOperations.addHandler(Pipe(to: outbound))
                }
            }
            .bind(host: "127.0.0.1", port: 0).wait()
        guard let port = server.localAddress?.port else { throw TestFailure("the relay has no port") }
        self.port = port
    }

    /// The network goes: every relayed connection is closed, and new ones are closed as they come.
    func cut() {
        let open = state.withLock { state in
            state.up = false
            defer { state.open = [] }
            return state.open
        }
        for channel in open { channel.close(promise: nil) }
    }

    /// The network is back: new connections are relayed again.
    func restore() { state.withLock { $0.up = true } }

    deinit {
        cut()
        try? server.close().wait()
        try? group.syncShutdownGracefully()
    }

    /// Writes what one side reads to the other (once it is connected, in order), and closes the other when one
    /// closes.
    private final class Pipe: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let partner: EventLoopFuture<any Channel>
        init(to partner: EventLoopFuture<any Channel>) { self.partner = partner }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = unwrapInboundIn(data)
            partner.whenSuccess { $0.writeAndFlush(bytes, promise: nil) }
        }
        func channelInactive(context: ChannelHandlerContext) { partner.whenSuccess { $0.close(promise: nil) } }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
    }
}
