import NIOCore
import NIOWebSocket
import RollCallCore
import RollCallWire

extension GatewayHandler.StateMachine {
    enum FrameAction: Equatable {
        case none
        /// A whole message to hand on (counted with the outbox first).
        case message(MessageAction)
        /// Answer a ping with this payload.
        case pong(ByteBuffer)
        /// Fail the connection (RFC 6455 §7.1.7): ask the loop to close with `code` after what it queued.
        case fail(code: UInt16, reason: String)
        /// The peer closes: answer with this code, close the TCP connection once it is written, and arm the cut.
        case answerClose(code: UInt16)
        /// The peer answered our close: close the TCP connection.
        case closeConnection
    }

    enum MessageAction: Equatable {
        /// A request (or why it could not be decoded) for the loop.
        case forward(Result<GatewayRequest, RequestRejection>)
        /// An `auth`: check `token`, holding later messages until it is done.
        case authenticate(token: String, requestID: JSON?)
        /// Nothing now: the message waits behind an `auth` being checked, or the token has expired and its close is
        /// on its way.
        case nothing
    }

    /// One frame from the peer at `now`. Any frame shows the peer is alive. What RFC 6455 says to fail fails the
    /// connection: an unmasked frame, reserved bits without an extension, an unknown opcode (1002), a text message
    /// that is not UTF-8 (1007).
    mutating func frame(_ frame: WebSocketFrame, now: Int64) -> FrameAction {
        switch state {
        case .open(var open):
            open.awaitingPeer = false
            state = .open(open)
            return openFrame(frame, open: open, now: now)
        case .refused, .closeRequested, .closing:
            // Only the peer's close matters now: the answer to ours, or its own, which ends it too.
            return frame.opcode == .connectionClose ? .closeConnection : .none
        case .ended:
            return .none
        }
    }

    private mutating func openFrame(_ frame: WebSocketFrame, open: Open, now: Int64) -> FrameAction {
        // §5.1: a server MUST close the connection on an unmasked client frame. §5.2: a nonzero reserved bit
        // without a negotiated extension (RollCall negotiates none) MUST fail the connection.
        guard frame.maskKey != nil else { return fail(1002, "a client frame must be masked") }
        guard !frame.rsv1, !frame.rsv2, !frame.rsv3 else { return fail(1002, "reserved bits set, no extension") }
        var open = open
        switch frame.opcode {
        case .text, .binary:
            guard open.fragments == nil else { return fail(1002, "a new message inside a fragmented one") }
            if frame.fin { return whole(frame.unmaskedData, isText: frame.opcode == .text, now: now) }
            open.fragments = Fragments(message: frame.unmaskedData, isText: frame.opcode == .text)
            state = .open(open)
            return .none
        case .continuation:
            guard var fragments = open.fragments else { return fail(1002, "a continuation without a message") }
            var data = frame.unmaskedData
            guard fragments.message.readableBytes + data.readableBytes <= limits.maxMessageBytes else {
                return fail(1009, "a message is at most \(limits.maxMessageBytes) bytes")
            }
            fragments.message.writeBuffer(&data)
            open.fragments = frame.fin ? nil : fragments
            state = .open(open)
            return frame.fin ? whole(fragments.message, isText: fragments.isText, now: now) : .none
        case .ping:
            switch open.pong {
            case .idle:
                open.pong = .inFlight(next: nil)
                state = .open(open)
                return .pong(frame.unmaskedData)
            case .inFlight:
                open.pong = .inFlight(next: frame.unmaskedData)
                state = .open(open)
                return .none
            }
        case .pong:
            return .none  // the peer is alive, which is all a pong says
        case .connectionClose:
            return peerCloses(frame.unmaskedData)
        default:
            return fail(1002, "unknown opcode \(frame.opcode)")
        }
    }

    /// The peer's close (§5.5.1, §7.4): echo a valid code (1000 without one); a payload of one byte or an invalid
    /// code fails the connection with 1002, a reason that is not UTF-8 with 1007.
    private mutating func peerCloses(_ payload: ByteBuffer) -> FrameAction {
        var payload = payload
        let code: UInt16
        switch payload.readableBytes {
        case 0:
            code = 1000
        case 1:
            return closeAt(1002)
        default:
            let received = payload.readInteger(as: UInt16.self)!
            guard Self.isValidReceivedCloseCode(received) else { return closeAt(1002) }
            guard Self.isUTF8(payload.readableBytesView) else { return closeAt(1007) }
            code = received
        }
        return closeAt(code)
    }

    private mutating func closeAt(_ code: UInt16) -> FrameAction {
        state = .closing
        return .answerClose(code: code)
    }

    /// A whole message: a text one is handed on if it is UTF-8; a binary one fails with 1003.
    private mutating func whole(_ message: ByteBuffer, isText: Bool, now: Int64) -> FrameAction {
        guard isText else { return fail(1003, "RollCall speaks JSON in text frames") }
        // §8.1: a text message that is not UTF-8 MUST fail the connection (1007, §7.4.1).
        guard Self.isUTF8(message.readableBytesView) else { return fail(1007, "a text message must be UTF-8") }
        return .message(self.message(Array(message.readableBytesView), now: now))
    }

    /// What becomes of one text message: it waits behind an `auth` being checked, is dropped once the token has
    /// expired, starts a token check if it is an `auth`, and is otherwise decoded for the loop.
    mutating func message(_ message: [UInt8], now: Int64) -> MessageAction {
        guard case .open(var open) = state else { return .nothing }
        if open.checking != nil {
            open.held.append(message)
            state = .open(open)
            return .nothing
        }
        if Self.hasExpired(open.expires, now: now) { return .nothing }
        let request = Codec.decodeGatewayRequest(message, limits: limits.presence, maxTopics: limits.maxTopics)
        guard case .success(.auth(let requestID, let token)) = request else { return .forward(request) }
        guard limits.takesTokens else {
            return .forward(
                .failure(
                    RequestRejection(id: requestID, error: PresenceError(.badRequest, "this endpoint takes no tokens")))
            )
        }
        open.checking = Checking(requestID: requestID)
        state = .open(open)
        return .authenticate(token: token, requestID: requestID)
    }

    private mutating func fail(_ code: UInt16, _ reason: String) -> FrameAction {
        state = .closeRequested
        return .fail(code: code, reason: reason)
    }

    /// Close codes an endpoint may receive (RFC 6455 §7.4.1, §7.4.2 and IANA's registry): 1000-1003 and 1007-1014
    /// defined, 3000-4999 for libraries and applications; 1004-1006 and 1015 must never be sent.
    static func isValidReceivedCloseCode(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1014, 3000...4999: true
        default: false
        }
    }

    static func isUTF8(_ bytes: ByteBufferView) -> Bool {
        String(validating: bytes, as: UTF8.self) != nil
    }
}
