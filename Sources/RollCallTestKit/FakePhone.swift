import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import RollCallCore
import RollCallWire
import Synchronization

/// A phone app over the broker's WebSocket door (``TestBroker/init(webSocket:operations:_:)``), for tests of an
/// app's mobile side: a session kept alive by its connection (`"keepalive":"connection"`), a background held status
/// (`after_ms`) and a foreground, and the ways phones fail.
///
/// `crash()` closes the connection without a close frame (the kernel's FIN, as when the app is killed);
/// `goSilent()` stops answering the broker's pings and sends nothing more while the connection stays open, as when
/// the phone loses its network: the broker cuts it after two ping intervals (on the test clock in test mode). It is
/// built on SwiftNIO's WebSocket codec rather than a WebSocket client library, because a library answers pings by
/// itself, and a silent phone must not.
public final class FakePhone: Sendable {
    public let user: UserID
    private let url: String
    private let token: String?
    private let state = Mutex(State())

    private struct State {
        var channel: (any Channel)?
        var handler: PhoneHandler?
        var session: SessionID?
        var nextID = 0
    }

    /// A phone of `user` for the door at `url` (``TestBroker/webSocketURL``), with a token if the door asks for one.
    public init(url: String, user: UserID, token: String? = nil) {
        self.url = url
        self.user = user
        self.token = token
    }

    /// Connects and says hello, kept alive by the connection.
    public func online(_ status: Status = .online, text: String? = nil) async throws {
        let (host, port, path) = try Self.parse(url)
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let upgraded = Upgrade(loop.makePromise(of: Void.self))
        let handler = PhoneHandler()
        let headers = token.map { HTTPHeaders([("Authorization", "Bearer \($0)")]) } ?? HTTPHeaders()
        let channel = try await ClientBootstrap(group: loop)
            .channelInitializer { channel in
                let upgrader = NIOWebSocketClientUpgrader(
                    requestKey: "dGhlIHNhbXBsZSBub25jZQ==", automaticErrorHandling: false
                ) { channel, _ in
                    // The requester closes on any HTTP response that is not the upgrade: it goes with the upgrade.
                    channel.pipeline.removeHandler(name: UpgradeRequester.name).flatMap {
                        channel.pipeline.addHandler(handler)
                    }.map { upgraded.succeed() }
                }
                return channel.pipeline.addHTTPClientHandlers(
                    withClientUpgrade: (upgraders: [upgrader], completionHandler: { _ in })
                ).flatMap {
                    channel.pipeline.addHandler(
                        UpgradeRequester(host: host, port: port, path: path, headers: headers),
                        name: UpgradeRequester.name)
                }
            }
            .connect(host: host, port: port).get()
        channel.closeFuture.whenComplete { _ in
            upgraded.fail(TestKitFailure("the WebSocket upgrade was refused, or the connection closed"))
        }
        try await upgraded.future.get()
        state.withLock {
            $0.channel = channel
            $0.handler = handler
        }
        let hello = PresenceCore.Hello(user: user, device: "phone", status: status, text: text, keepAlive: .connection)
        let reply = try await request(.hello(hello))
        guard case .string(let session)? = reply[JSONKey("session")] else {
            throw TestKitFailure("hello answered without a session: \(reply)")
        }
        state.withLock { $0.session = SessionID(session) }
    }

    /// Sets the status at once (a held one is replaced, or cancelled when this is what the session has).
    public func set(_ status: Status, text: String? = nil) async throws {
        _ = try await request(.status(session: try live(), status: status, text: text))
    }

    /// The app goes to the background: `status` held for `after` ms. Returns whether the broker holds a change.
    @discardableResult
    public func background(after milliseconds: Int64 = 5_000, status: Status = .offline) async throws -> Bool {
        let reply = try await request(
            .status(session: try live(), status: status, text: nil, afterMilliseconds: milliseconds))
        return reply[JSONKey("held")] == .bool(true)
    }

    /// The app is back in the foreground: a held background status still waiting is cancelled.
    public func foreground(_ status: Status = .online) async throws { try await set(status) }

    /// The app is killed: the connection closes without a close frame or a bye.
    public func crash() async {
        let channel = state.withLock { state in
            defer { state = State() }
            return state.channel
        }
        try? await channel?.close()
    }

    /// The network is gone without a FIN: nothing answers the broker's pings and nothing more is sent; the connection
    /// stays open until the broker cuts it (or ``crash()``).
    public func goSilent() {
        state.withLock { state in
            state.handler?.silence()
            state.session = nil
        }
    }

    private func live() throws -> SessionID {
        guard let session = state.withLock({ $0.session }) else {
            throw TestKitFailure("the phone of \(user) is not online")
        }
        return session
    }

    /// Sends the request with the next id and waits (at most 5 s) for the reply with that id.
    private func request(_ request: Request) async throws -> [JSONKey: JSON] {
        let (channel, handler, id) = try state.withLock { state in
            guard let channel = state.channel, let handler = state.handler else {
                throw TestKitFailure("the phone of \(user) is not connected")
            }
            state.nextID += 1
            return (channel, handler, state.nextID)
        }
        let body = Codec.encodeRequest(request, id: .number(String(id)))
        let reply = try await handler.reply(to: id, within: .seconds(5)) {
            var buffer = channel.allocator.buffer(capacity: body.count)
            buffer.writeBytes(body)
            let frame = WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: buffer)
            channel.writeAndFlush(frame, promise: nil)
        }
        guard case .object(let object) = reply else { throw TestKitFailure("\(request.op): not an object: \(reply)") }
        if object[JSONKey("ok")] == .bool(false) {
            throw TestKitFailure("\(request.op) refused: \(reply)")
        }
        return object
    }

    private static func parse(_ url: String) throws -> (host: String, port: Int, path: String) {
        guard url.hasPrefix("ws://") else { throw TestKitFailure("a fake phone speaks ws:// only, not \(url)") }
        let rest = url.dropFirst(5)
        let authority = rest.prefix { $0 != "/" }
        let path = String(rest.dropFirst(authority.count))
        guard let colon = authority.lastIndex(of: ":"), let port = Int(authority[authority.index(after: colon)...])
        else { throw TestKitFailure("no port in \(url)") }
        return (String(authority[..<colon]), port, path.isEmpty ? "/" : path)
    }
}

/// The upgrade's outcome, completed once: by the upgrade, or by the connection's close before it.
private final class Upgrade: Sendable {
    let promise: EventLoopPromise<Void>
    private let done = Atomic<Bool>(false)
    init(_ promise: EventLoopPromise<Void>) { self.promise = promise }
    var future: EventLoopFuture<Void> { promise.futureResult }
    func succeed() { if !done.exchange(true, ordering: .acquiringAndReleasing) { promise.succeed() } }
    func fail(_ error: any Error) { if !done.exchange(true, ordering: .acquiringAndReleasing) { promise.fail(error) } }
}

/// Sends the upgrade request once the connection is up.
private final class UpgradeRequester: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart
    static let name = "rollcall-fake-phone-upgrade"
    let host: String
    let port: Int
    let path: String
    let headers: HTTPHeaders

    init(host: String, port: Int, path: String, headers: HTTPHeaders) {
        self.host = host
        self.port = port
        self.path = path
        self.headers = headers
    }

    func channelActive(context: ChannelHandlerContext) {
        var headers = self.headers
        headers.add(name: "Host", value: "\(host):\(port)")
        headers.add(name: "Content-Length", value: "0")
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // A response that is not the upgrade (a 401, a 503): the connection is of no use.
        context.close(promise: nil)
    }
}

/// The phone's side of the upgraded connection: replies matched to their requests by id, pings answered until the
/// phone goes silent, updates dropped (a fake phone publishes; tests watch with ``Watch``).
private final class PhoneHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let waiting = Mutex<[Int: CheckedContinuation<JSON, Error>]>([:])
    private let silent = Atomic<Bool>(false)

    func silence() { silent.store(true, ordering: .sequentiallyConsistent) }

    func reply(to id: Int, within timeout: Duration, send: () -> Void) async throws -> JSON {
        try await withThrowingTaskGroup(of: JSON.self) { group in
            group.addTask {
                try await withCheckedThrowingContinuation { continuation in
                    self.waiting.withLock { $0[id] = continuation }
                }
            }
            send()
            group.addTask {
                try await Task.sleep(for: timeout)
                throw TestKitFailure("no reply to request \(id) within \(timeout)")
            }
            defer { group.cancelAll() }
            let reply = try await group.next()!
            return reply
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .ping where !silent.load(ordering: .sequentiallyConsistent):
            let pong = WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .text:
            let bytes = Array(frame.unmaskedData.readableBytesView)
            guard case .object(let fields)? = try? JSONParser.parse(bytes), fields[JSONKey("topic")] == nil,
                case .number(let text)? = fields[JSONKey("id")], let id = Int(text),
                let continuation = waiting.withLock({ $0.removeValue(forKey: id) })
            else { return }
            continuation.resume(returning: .object(fields))
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        let pending = waiting.withLock { waiting in
            defer { waiting.removeAll() }
            return Array(waiting.values)
        }
        for continuation in pending { continuation.resume(throwing: TestKitFailure("the phone's connection closed")) }
    }
}
