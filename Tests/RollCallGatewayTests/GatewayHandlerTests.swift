import JWTKit
import Logging
import NIOCore
import NIOEmbedded
import NIOWebSocket
import RollCallCore
import RollCallSecurity
import RollCallWire
import Synchronization
import Testing

@testable import RollCallBroker
@testable import RollCallGateway

/// The WebSocket connection's channel handler on an `EmbeddedChannel`, as swift-nio tests its own handlers: frames in,
/// frames out, the loop played by a recorder, timers on the embedded loop's clock.
@Suite struct GatewayHandlerTests {
    /// A connection on an embedded channel, without tokens, and the loop it talks to.
    struct Connection {
        let channel = EmbeddedChannel()
        let loop: RecordingLoop
        let tables: ConnectionTables

        init(
            maxConnections: Int = 10, pingMilliseconds: Int64 = 1_000, testClock: TestClockSignal? = nil,
            verifier: TokenVerifier? = nil, grant: Grant? = nil
        ) throws {
            var configuration = BrokerConfiguration()
            configuration.webSocket.maxConnections = maxConnections
            configuration.webSocket.pingMilliseconds = pingMilliseconds
            loop = RecordingLoop(configuration: configuration)
            tables = ConnectionTables(
                interval: .milliseconds(pingMilliseconds), testClock: testClock, answerWindow: .zero)
            let shared = GatewayShared(
                gateway: loop, verifier: verifier, counter: ConnectionCounter(), connections: tables,
                logger: Logger(label: "test"), wallClock: { 1_893_499_200_000 })
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            try channel.pipeline.syncOperations.addHandler(GatewayHandler(shared: shared, grant: grant))
        }

        /// The frames the handler wrote, in order.
        func written() throws -> [WebSocketFrame] {
            channel.embeddedEventLoop.run()
            var frames: [WebSocketFrame] = []
            while let frame = try channel.readOutbound(as: WebSocketFrame.self) { frames.append(frame) }
            return frames
        }

        /// The close code of the one close frame written, if that is what was written.
        func closeCode() throws -> UInt16? {
            let frames = try written()
            guard frames.count == 1, frames[0].opcode == .connectionClose else { return nil }
            var data = frames[0].data
            return data.readInteger(as: UInt16.self)
        }
    }

    /// A grant for alice checked by `key`, an hour before it expires.
    static func grant(_ key: TokenKeyRef) -> Grant {
        let alice = UserID(validating: "alice")!
        return Grant(user: alice, role: .user(alice), expires: 1_893_499_200 + 3_600, key: key)
    }

    /// A reload's round of closes: the connection whose token k1 checked asks the loop to revoke it and is closed
    /// with 4003; the one of k2 writes nothing and stays open.
    @Test func aReloadClosesOnlyTheConnectionOfTheRemovedKey() async throws {
        let verifier = try await TokenVerifier(
            keyText: TokenMint.jwks([(ES256PrivateKey(), "k1"), (ES256PrivateKey(), "k2")]), rules: .init())
        let gone = try Connection(verifier: verifier, grant: Self.grant(.kid("k1")))
        let kept = try Connection(verifier: verifier, grant: Self.grant(.kid("k2")))
        #expect(try gone.written().isEmpty)
        for connection in [gone, kept] { connection.tables.revoke(RevokedKeys(kids: ["k1"])) }
        #expect(try gone.closeCode() == GatewayCloseCode.tokenRevoked)
        #expect(try kept.written().isEmpty)
        #expect(kept.channel.isActive)
    }

    /// A token whose key a reload took away before its connection was upgraded (it missed the round of closes) is
    /// revoked as soon as the connection opens; one whose key is still there is not.
    @Test func aTokenWhoseKeyWentDuringTheUpgradeIsRevokedOnOpen() async throws {
        let verifier = try await TokenVerifier(
            keyText: TokenMint.jwks([(ES256PrivateKey(), "k2")]), rules: .init())
        let late = try Connection(verifier: verifier, grant: Self.grant(.kid("k1")))
        #expect(try late.closeCode() == GatewayCloseCode.tokenRevoked)
        let kept = try Connection(verifier: verifier, grant: Self.grant(.kid("k2")))
        #expect(try kept.written().isEmpty)
    }

    /// A JWKS URL fetch's round of closes: the connection whose token the URL's k1 checked is closed with 4003; the
    /// one the URL's k2 checked, and the one the key file's own k1 checked, write nothing and stay open. (No
    /// verifier: the round decides on the grant's key alone; the look-up on open is the next test's.)
    @Test func aJWKSFetchClosesOnlyTheConnectionOfTheDroppedKid() throws {
        let gone = try Connection(grant: Self.grant(.jwksKid("k1")))
        let kept = try Connection(grant: Self.grant(.jwksKid("k2")))
        let fileKey = try Connection(grant: Self.grant(.kid("k1")))
        #expect(try gone.written().isEmpty)
        for connection in [gone, kept, fileKey] { connection.tables.revoke(RevokedKeys(jwksKids: ["k1"])) }
        #expect(try gone.closeCode() == GatewayCloseCode.tokenRevoked)
        #expect(try kept.written().isEmpty)
        #expect(try fileKey.written().isEmpty)
        #expect(kept.channel.isActive && fileKey.channel.isActive)
    }

    /// A token checked by the JWKS URL's k1 just before a fetch dropped k1 (its upgrade under way, so it missed the
    /// fetch's round of closes) is revoked as soon as its connection opens; one checked by k2, still served, is not.
    @Test func aTokenWhoseJWKSKeyWentDuringTheUpgradeIsRevokedOnOpen() async throws {
        let (first, second) = (ES256PrivateKey(), ES256PrivateKey())
        let endpoint = JWKSSourceTests.Endpoint()
        endpoint.serve(try TokenMint.jwks([(first, "k1"), (second, "k2")]))
        try await JWKSSourceTests.withEndpoint(endpoint) { url in
            let source = JWKSSource(url: url, logger: Logger(label: "jwks"))
            try await source.start()
            let verifier = try await TokenVerifier(
                keyFile: nil, jwks: source, rules: .init(), logger: Logger(label: "tokens"))
            let now = 1_893_499_200.0
            let claims = TokenMint.claims(now: now)
            let byFirst = try await verifier.verify(TokenMint.ecdsa(first, kid: "k1").token(claims), now: now)
            let bySecond = try await verifier.verify(TokenMint.ecdsa(second, kid: "k2").token(claims), now: now)
            endpoint.serve(try TokenMint.jwks([(second, "k2")]))
            await source.refreshNow()
            let late = try Connection(verifier: verifier, grant: byFirst)
            #expect(try late.closeCode() == GatewayCloseCode.tokenRevoked)
            let kept = try Connection(verifier: verifier, grant: bySecond)
            #expect(try kept.written().isEmpty)
        }
    }

    /// A text message goes to the loop, and what the loop queues for the connection is written as a text frame.
    @Test func messagesGoToTheLoopAndRepliesComeBack() throws {
        let connection = try Connection()
        try connection.channel.writeInbound(text(#"{"op":"ping","id":1}"#))
        #expect(connection.loop.requests == [.success(.request(RequestEnvelope(id: .number("1"), request: .ping)))])
        let outbox = try #require(connection.loop.outbox)
        #expect(outbox.push(Array(#"{"id":1}"#.utf8)) == .queued)
        let frames = try connection.written()
        #expect(frames.map(\.opcode) == [.text])
        #expect(frames.first.map { String(buffer: $0.data) } == #"{"id":1}"#)
        #expect(try connection.channel.finish().isClean)
        #expect(connection.loop.closedCount == 1)
    }

    /// An unmasked frame is answered with a close frame 1002 and reaches no one.
    @Test func unmaskedFrameIsClosedWith1002() throws {
        let connection = try Connection()
        try connection.channel.writeInbound(
            WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: #"{"op":"ping"}"#)))
        #expect(try connection.closeCode() == 1002)
        #expect(connection.loop.requests.isEmpty)
        _ = try connection.channel.finish()
    }

    /// A frame with a reserved bit set is answered with a close frame 1002.
    @Test func reservedBitIsClosedWith1002() throws {
        let connection = try Connection()
        var frame = text(#"{"op":"ping"}"#)
        frame.rsv1 = true
        try connection.channel.writeInbound(frame)
        #expect(try connection.closeCode() == 1002)
        #expect(connection.loop.requests.isEmpty)
        _ = try connection.channel.finish()
    }

    /// A text message that is not UTF-8 is answered with a close frame 1007, not a `bad_request` reply.
    @Test func invalidUTF8IsClosedWith1007() throws {
        let connection = try Connection()
        try connection.channel.writeInbound(frame(.text, [0x7B, 0xFF, 0x7D]))
        #expect(try connection.closeCode() == 1007)
        #expect(connection.loop.requests.isEmpty)
        _ = try connection.channel.finish()
    }

    /// A close with an invalid code is answered with 1002 (not echoed) and the connection is closed.
    @Test func invalidCloseCodeIsAnsweredWith1002() throws {
        let connection = try Connection()
        try connection.channel.writeInbound(close([0x03, 0xED]))  // 1005: never sent on the wire
        #expect(try connection.closeCode() == 1002)
        #expect(!connection.channel.isActive)
        _ = try? connection.channel.finish()
    }

    /// A valid close code is echoed and the connection is closed.
    @Test func validCloseCodeIsEchoed() throws {
        let connection = try Connection()
        try connection.channel.writeInbound(close([0x0F, 0xA0]))  // 4000
        #expect(try connection.closeCode() == 4000)
        #expect(!connection.channel.isActive)
        _ = try? connection.channel.finish()
    }

    /// The ping timer pings the peer; a peer silent until the next ping is cut, and the loop hears the close.
    @Test func silentPeerIsCutAtTheSecondPing() throws {
        let connection = try Connection(pingMilliseconds: 1_000)
        connection.channel.embeddedEventLoop.advanceTime(by: .milliseconds(1_000))
        #expect(try connection.written().map(\.opcode) == [.ping])
        #expect(connection.channel.isActive)
        connection.channel.embeddedEventLoop.advanceTime(by: .milliseconds(1_000))
        #expect(!connection.channel.isActive)
        #expect(connection.loop.closedCount == 1)
        _ = try? connection.channel.finish()
    }

    /// On the broker's test clock the pings follow its moves, not SwiftNIO's timers: a silent peer is cut once the
    /// clock has moved two intervals, in two moves, however little real time passed.
    @Test func testClockDrivesPings() throws {
        let clock = TestClockSignal(time: BrokerTime(milliseconds: 1_000_000))
        let connection = try Connection(pingMilliseconds: 10_000, testClock: clock)
        connection.channel.embeddedEventLoop.advanceTime(by: .milliseconds(30_000))
        #expect(try connection.written().isEmpty)
        clock.moved(to: BrokerTime(milliseconds: 1_009_999))
        #expect(try connection.written().isEmpty)
        // One move across several intervals is one round: the peer gets its chance to answer.
        clock.moved(to: BrokerTime(milliseconds: 1_030_000))
        #expect(try connection.written().map(\.opcode) == [.ping])
        #expect(connection.channel.isActive)
        clock.moved(to: BrokerTime(milliseconds: 1_040_000))
        connection.channel.embeddedEventLoop.run()
        #expect(!connection.channel.isActive)
        #expect(connection.loop.closedCount == 1)
        _ = try? connection.channel.finish()
    }

    /// A peer that answers each ping stays connected.
    @Test func answeringPeerStays() throws {
        let connection = try Connection(pingMilliseconds: 1_000)
        for _ in 0..<3 {
            connection.channel.embeddedEventLoop.advanceTime(by: .milliseconds(1_000))
            #expect(try connection.written().map(\.opcode) == [.ping])
            try connection.channel.writeInbound(frame(.pong, ""))
        }
        #expect(connection.channel.isActive)
        #expect(try connection.channel.finish().isClean)
    }

    /// A connection past the cap is closed with 1013 and never reaches the loop.
    @Test func connectionPastTheCapGets1013() throws {
        let connection = try Connection(maxConnections: 0)
        #expect(try connection.closeCode() == 1013)
        #expect(connection.loop.outbox == nil)
        _ = try? connection.channel.finish()
    }

    /// The server stopping closes the connection with 1001 after what the loop queued.
    @Test func stoppingSends1001AfterQueuedFrames() throws {
        let connection = try Connection()
        let outbox = try #require(connection.loop.outbox)
        _ = outbox.push(Array(#"{"last":true}"#.utf8))
        connection.channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        let frames = try connection.written()
        #expect(frames.map(\.opcode) == [.text, .connectionClose])
        var close = try #require(frames.last).data
        #expect(close.readInteger(as: UInt16.self) == 1001)
        _ = try? connection.channel.finish()
    }
}

/// The event loop, played by a recorder: what the connection handed it.
final class RecordingLoop: GatewayLoop {
    let configuration: BrokerConfiguration
    let testClock: TestClockSignal? = nil
    private let state = Mutex<
        (outbox: GatewayOutbox?, requests: [Result<GatewayRequest, RequestRejection>], closed: Int)
    >(
        (nil, [], 0))

    init(configuration: BrokerConfiguration) { self.configuration = configuration }

    var outbox: GatewayOutbox? { state.withLock { $0.outbox } }
    var requests: [Result<GatewayRequest, RequestRejection>] { state.withLock { $0.requests } }
    var closedCount: Int { state.withLock { $0.closed } }

    func open(access: Access, outbox: GatewayOutbox) { state.withLock { $0.outbox = outbox } }

    func handle(_ request: Result<GatewayRequest, RequestRejection>, from outbox: GatewayOutbox) {
        state.withLock { $0.requests.append(request) }
        outbox.requestDone()
    }

    func reauthorize(_ outbox: GatewayOutbox, access: Access, id: JSON?, expires: Int64) { outbox.requestDone() }

    func revoke(_ outbox: GatewayOutbox) { outbox.close(code: GatewayCloseCode.tokenRevoked, reason: "token revoked") }
    func closed(_ outbox: GatewayOutbox) { state.withLock { $0.closed += 1 } }
}
