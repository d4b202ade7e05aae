import Foundation
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket
import RollCallBroker
import RollCallCore
import RollCallSecurity
import RollCallWire
import ServiceLifecycle
import Synchronization

/// One WebSocket connection: reads frames and hands them to the event loop, writes what the loop queued for it, and
/// closes it when its token expires. Its end, however it comes, is a connection close for the loop.
struct GatewayConnection {
    let gateway: BrokerGateway
    let verifier: TokenVerifier?
    let grant: Grant?
    let channel: any Channel
    let logger: Logger
    let counter: ConnectionCounter

    /// How long a connection closed for being too slow has to take its close frame before its TCP connection is cut.
    static let cutAfter: TimeAmount = .seconds(2)

    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let configuration = gateway.configuration
        defer { counter.remove() }
        guard counter.add() <= configuration.webSocket.maxConnections else {
            try await outbound.close(
                .init(codeNumber: Int(GatewayCloseCode.unavailable)), reason: "too many connections")
            return
        }
        let outbox = GatewayOutbox(limitBytes: configuration.webSocket.sendQueueBytes)
        guard let id = await gateway.open(access: grant.map { .role($0.role) } ?? .open, outbox: outbox) else {
            try await outbound.close(.init(codeNumber: Int(GatewayCloseCode.unavailable)), reason: "broker stopping")
            return
        }
        defer {
            outbox.finish()
            gateway.closed(id)
        }
        // A peer that does not read leaves the writer waiting for room: once the loop closes it, its close frame
        // gets a moment, then the TCP connection is cut.
        outbox.whenClosed { [channel] in
            channel.eventLoop.scheduleTask(in: Self.cutAfter) { channel.close(promise: nil) }
        }
        let expiry = Expiry(grant?.expires)
        // Shutdown: the connection is closed (1001), and cut 2 s later if the peer does not answer the close, so a
        // peer that never reads cannot hold the server's shutdown.
        try await withGracefulShutdownHandler {
            try await serve(inbound, outbound, id: id, outbox: outbox, expiry: expiry)
        } onGracefulShutdown: {
            outbox.close(code: 1001, reason: "the broker is stopping")
        }
    }

    private func serve(
        _ inbound: WebSocketInboundStream, _ outbound: WebSocketOutboundWriter, id: ConnectionID,
        outbox: GatewayOutbox, expiry: Expiry
    ) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await write(outbox, outbound) }
            if grant != nil { group.addTask { try await expire(expiry, outbox) } }
            defer {
                outbox.finish()  // the writer stops waiting
                group.cancelAll()  // and the expiry timer
            }
            try await read(inbound, id: id, outbox: outbox, expiry: expiry)
        }
    }

    /// Hands each text frame to the loop, at most ``GatewayOutbox/maxInFlight`` at a time.
    private func read(
        _ inbound: WebSocketInboundStream, id: ConnectionID, outbox: GatewayOutbox, expiry: Expiry
    ) async throws {
        let configuration = gateway.configuration
        for try await message in inbound.messages(maxSize: configuration.maxMessageBytes) {
            guard case .text(let text) = message else {
                outbox.close(code: 1003, reason: "RollCall speaks JSON in text frames")
                continue
            }
            await outbox.beginRequest()
            if expiry.hasPassed { continue }  // the close is on its way; nothing more is done for this token
            let request = Codec.decodeGatewayRequest(
                Array(text.utf8), limits: configuration.presence, maxTopics: configuration.webSocket.maxSubscriptions)
            guard case .success(.auth(let requestID, let token)) = request else {
                gateway.handle(request, from: id)
                continue
            }
            await authenticate(token, requestID: requestID, id: id, expiry: expiry)
        }
    }

    /// `auth`: a fresh token for the same user replaces the connection's; anything else is refused and the old
    /// token stays.
    private func authenticate(_ token: String, requestID: JSON?, id: ConnectionID, expiry: Expiry) async {
        guard let verifier, let grant else {
            gateway.handle(
                .failure(
                    RequestRejection(
                        id: requestID, error: PresenceError(.badRequest, "this endpoint takes no tokens"))),
                from: id)
            return
        }
        do {
            let fresh = try await verifier.verify(token)
            guard fresh.user == grant.user else {
                gateway.handle(
                    .failure(
                        RequestRejection(
                            id: requestID,
                            error: PresenceError(.forbidden, "a fresh token must be for the same user (\(grant.user))")
                        )), from: id)
                return
            }
            expiry.set(fresh.expires)
            gateway.reauthorize(id, access: .role(fresh.role), id: requestID, expires: fresh.expires)
        } catch {
            logger.debug("fresh token refused", metadata: ["reason": "\(error)"])
            gateway.handle(
                .failure(
                    RequestRejection(
                        id: requestID,
                        error: PresenceError(.forbidden, "the token was refused; the old one still holds"))),
                from: id)
        }
    }

    /// Writes what the loop queued, in order, at the peer's pace.
    private func write(_ outbox: GatewayOutbox, _ outbound: WebSocketOutboundWriter) async throws {
        while true {
            let items = await outbox.next()
            if items.isEmpty { return }
            for item in items {
                switch item {
                case .frame(let bytes):
                    try await outbound.write(
                        .custom(WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(bytes: bytes))))
                case .close(let code, let reason):
                    try await outbound.close(.init(codeNumber: Int(code)), reason: reason)
                    return
                }
            }
        }
    }

    /// Closes the connection with 4001 when its token expires without a fresh one.
    private func expire(_ expiry: Expiry, _ outbox: GatewayOutbox) async throws {
        while true {
            let left = expiry.secondsLeft
            if left <= 0 {
                outbox.close(code: GatewayCloseCode.tokenExpired, reason: "token expired")
                return
            }
            try await Task.sleep(for: .seconds(left))
        }
    }
}

/// When a connection's token expires, in seconds since 1970, moved by `auth`.
final class Expiry: Sendable {
    private let expires: Atomic<Int64>

    init(_ expires: Int64?) { self.expires = Atomic(expires ?? .max) }

    func set(_ value: Int64) { expires.store(value, ordering: .relaxed) }

    /// Seconds until it expires (fractions included); 0 or less once it has.
    var secondsLeft: Double {
        let value = expires.load(ordering: .relaxed)
        return value == .max ? .infinity : Double(value) - Date().timeIntervalSince1970
    }

    var hasPassed: Bool { secondsLeft <= 0 }
}
