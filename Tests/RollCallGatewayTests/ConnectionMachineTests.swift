import NIOCore
import NIOWebSocket
import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

@testable import RollCallGateway

/// The WebSocket connection's decisions, without a socket, on a clock the tests move.
@Suite struct ConnectionMachineTests {
    typealias Machine = GatewayHandler.StateMachine

    /// Noon on 1 January 2030, in milliseconds since 1970.
    static let noon: Int64 = 1_893_499_200_000
    static let alice = UserID(validating: "alice")!

    /// An open connection; with a token for alice expiring `expiresIn` seconds after noon, unless `tokens` is false.
    static func open(tokens: Bool = true, expiresIn: Int64 = 600, maxMessageBytes: Int = 65_536) -> Machine {
        let grant = tokens ? Grant(user: alice, role: .user(alice), expires: noon / 1_000 + expiresIn) : nil
        var machine = Machine(
            limits: .init(
                maxConnections: 10, maxMessageBytes: maxMessageBytes, presence: .init(), maxTopics: 100,
                takesTokens: tokens),
            grant: grant)
        _ = machine.upgraded(connections: 1)
        return machine
    }

    /// The first open connection is opened, and one past the cap is refused with 1013.
    @Test func upgradePastTheCapIsRefused() {
        var machine = Machine(
            limits: .init(maxConnections: 1, maxMessageBytes: 100, presence: .init(), maxTopics: 1, takesTokens: false),
            grant: nil)
        #expect(machine.upgraded(connections: 2) == .refuse(code: 1013, reason: "too many connections"))
        #expect(machine.frame(text(#"{"op":"ping"}"#), now: Self.noon) == .none)
        #expect(machine.serverStopping() == .closeConnection)
    }

    /// A whole text message is decoded and handed on.
    @Test func textMessageIsForwarded() {
        var machine = Self.open()
        guard
            case .message(.forward(.success(let request))) = machine.frame(
                text(#"{"op":"ping","id":1}"#), now: Self.noon)
        else {
            Issue.record("not forwarded")
            return
        }
        #expect(request == .request(RequestEnvelope(id: .number("1"), request: .ping)))
    }

    /// A message split in fragments is handed on once, whole, after its last fragment.
    @Test func fragmentsAreJoined() {
        var machine = Self.open()
        #expect(machine.frame(frame(.text, #"{"op":"#, fin: false), now: Self.noon) == .none)
        #expect(machine.frame(frame(.continuation, #""ping","id":2"#, fin: false), now: Self.noon) == .none)
        let last = machine.frame(frame(.continuation, "}"), now: Self.noon)
        #expect(last == .message(.forward(.success(.request(RequestEnvelope(id: .number("2"), request: .ping))))))
    }

    /// A client frame without a mask fails the connection with 1002 (RFC 6455 §5.1).
    @Test func unmaskedFrameFailsWith1002() {
        var machine = Self.open()
        let unmasked = WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: #"{"op":"ping"}"#))
        #expect(machine.frame(unmasked, now: Self.noon) == .fail(code: 1002, reason: "a client frame must be masked"))
    }

    /// A frame with any reserved bit set, no extension being negotiated, fails the connection with 1002 (§5.2).
    @Test(arguments: [(true, false, false), (false, true, false), (false, false, true)])
    func reservedBitsFailWith1002(bits: (Bool, Bool, Bool)) {
        var machine = Self.open()
        var frame = text(#"{"op":"ping"}"#)
        (frame.rsv1, frame.rsv2, frame.rsv3) = bits
        #expect(machine.frame(frame, now: Self.noon) == .fail(code: 1002, reason: "reserved bits set, no extension"))
    }

    /// A frame with a reserved opcode fails the connection with 1002 (§5.2).
    @Test func unknownOpcodeFailsWith1002() {
        var machine = Self.open()
        let action = machine.frame(frame(WebSocketOpcode(encodedWebSocketOpcode: 0x3)!, "x"), now: Self.noon)
        guard case .fail(let code, _) = action else {
            Issue.record("\(action)")
            return
        }
        #expect(code == 1002)
    }

    /// A text message that is not UTF-8 fails the connection with 1007 (§8.1), also when split in fragments.
    @Test func invalidUTF8FailsWith1007() {
        var machine = Self.open()
        #expect(
            machine.frame(frame(.text, [0x7B, 0xC3, 0x28, 0x7D]), now: Self.noon)
                == .fail(code: 1007, reason: "a text message must be UTF-8"))
        var split = Self.open()
        // A two-byte character cut between two fragments is still UTF-8 once joined.
        #expect(split.frame(frame(.text, [0x22, 0xC3], fin: false), now: Self.noon) == .none)
        guard case .message(.forward) = split.frame(frame(.continuation, [0xA9, 0x22]), now: Self.noon) else {
            Issue.record("a valid message split inside a character was refused")
            return
        }
        #expect(split.frame(frame(.text, [0x22, 0xC3], fin: false), now: Self.noon) == .none)
        #expect(
            split.frame(frame(.continuation, [0x22]), now: Self.noon)
                == .fail(code: 1007, reason: "a text message must be UTF-8"))
    }

    /// A binary message fails with 1003; a continuation without a message, or a message inside one, with 1002.
    @Test func framesOutOfPlaceFail() {
        var binary = Self.open()
        #expect(
            binary.frame(frame(.binary, "{}"), now: Self.noon)
                == .fail(code: 1003, reason: "RollCall speaks JSON in text frames"))
        var orphan = Self.open()
        #expect(
            orphan.frame(frame(.continuation, "{}"), now: Self.noon)
                == .fail(code: 1002, reason: "a continuation without a message"))
        var nested = Self.open()
        _ = nested.frame(frame(.text, "{", fin: false), now: Self.noon)
        #expect(
            nested.frame(frame(.text, "{}"), now: Self.noon)
                == .fail(code: 1002, reason: "a new message inside a fragmented one"))
    }

    /// Fragments that add up to more than the largest message fail the connection with 1009.
    @Test func oversizedFragmentsFailWith1009() {
        var machine = Self.open(maxMessageBytes: 8)
        _ = machine.frame(frame(.text, "{\"op\":", fin: false), now: Self.noon)
        #expect(
            machine.frame(frame(.continuation, "\"ping\"}"), now: Self.noon)
                == .fail(code: 1009, reason: "a message is at most 8 bytes"))
    }

    /// Once the connection has failed, nothing more is handed on, and the peer's close ends it.
    @Test func afterAFailureOnlyTheCloseCounts() {
        var machine = Self.open()
        _ = machine.frame(frame(.binary, "x"), now: Self.noon)
        #expect(machine.frame(text(#"{"op":"ping"}"#), now: Self.noon) == .none)
        #expect(machine.pingDue() == .none)
        #expect(machine.loopCloses(code: 1003, reason: "binary") == .sendClose(code: 1003, reason: "binary"))
        #expect(!machine.writes)
        #expect(machine.frame(close([0x03, 0xEB]), now: Self.noon) == .closeConnection)
    }

    /// The peer's close is answered with its code, or 1000 when it gave none.
    @Test(arguments: [(UInt16(1000), UInt16(1000)), (1001, 1001), (1011, 1011), (3000, 3000), (4999, 4999)])
    func validCloseCodesAreEchoed(sent: UInt16, answered: UInt16) {
        var machine = Self.open()
        #expect(
            machine.frame(close([UInt8(sent >> 8), UInt8(sent & 0xFF)]), now: Self.noon) == .answerClose(code: answered)
        )
        var empty = Self.open()
        #expect(empty.frame(close([]), now: Self.noon) == .answerClose(code: 1000))
    }

    /// A close with a code no endpoint may send, or a one-byte payload, is answered with 1002, not echoed (§7.4).
    @Test(arguments: [UInt16(0), 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65_535])
    func invalidCloseCodesGet1002(code: UInt16) {
        var machine = Self.open()
        #expect(
            machine.frame(close([UInt8(code >> 8), UInt8(code & 0xFF)]), now: Self.noon) == .answerClose(code: 1002))
        var short = Self.open()
        #expect(short.frame(close([0x03]), now: Self.noon) == .answerClose(code: 1002))
    }

    /// A close whose reason is not UTF-8 is answered with 1007.
    @Test func closeReasonNotUTF8Gets1007() {
        var machine = Self.open()
        #expect(machine.frame(close([0x03, 0xE8, 0xFF]), now: Self.noon) == .answerClose(code: 1007))
    }

    /// A ping is answered; pings that come while a pong is on its way leave one pong to send, the latest's.
    @Test func pingsHoldOnePong() {
        var machine = Self.open()
        #expect(machine.frame(frame(.ping, "a"), now: Self.noon) == .pong(ByteBuffer(string: "a")))
        #expect(machine.frame(frame(.ping, "b"), now: Self.noon) == .none)
        #expect(machine.frame(frame(.ping, "c"), now: Self.noon) == .none)
        #expect(machine.pongWritten() == ByteBuffer(string: "c"))
        #expect(machine.pongWritten() == nil)
        #expect(machine.frame(frame(.ping, "d"), now: Self.noon) == .pong(ByteBuffer(string: "d")))
    }

    /// A peer that sends nothing between two pings is cut at the second; any frame in between keeps it.
    @Test func silentPeerIsCutAtTheNextPing() {
        var machine = Self.open()
        #expect(machine.pingDue() == .ping)
        #expect(machine.frame(frame(.pong, ""), now: Self.noon) == .none)
        #expect(machine.pingDue() == .ping)
        #expect(machine.pingDue() == .cut)
    }

    /// While an `auth` is checked, later messages wait and reading stops; a fresh token for the same user moves
    /// the expiry, and the waiting messages are then taken in order.
    @Test func authHoldsLaterMessagesInOrder() {
        var machine = Self.open()
        #expect(
            machine.frame(text(#"{"op":"auth","id":1,"token":"t"}"#), now: Self.noon)
                == .message(.authenticate(token: "t", requestID: .number("1"))))
        #expect(machine.frame(text(#"{"op":"ping","id":2}"#), now: Self.noon) == .message(.nothing))
        #expect(machine.frame(text(#"{"op":"ping","id":3}"#), now: Self.noon) == .message(.nothing))
        #expect(machine.readWanted() == false)
        let fresh = Grant(user: Self.alice, role: .user(Self.alice), expires: Self.noon / 1_000 + 7_200)
        #expect(machine.tokenChecked(fresh, now: Self.noon) == .reauthorize(fresh, requestID: .number("1")))
        #expect(
            machine.nextHeld(now: Self.noon)
                == .forward(.success(.request(RequestEnvelope(id: .number("2"), request: .ping)))))
        #expect(
            machine.nextHeld(now: Self.noon)
                == .forward(.success(.request(RequestEnvelope(id: .number("3"), request: .ping)))))
        #expect(machine.nextHeld(now: Self.noon) == nil)
        #expect(machine.resumeAfterHeld() == true)
        #expect(machine.expiry(now: Self.noon) == .wait(milliseconds: 7_200_000))
    }

    /// A token for another user, or one that does not check out, is refused and the old expiry stays.
    @Test func authForAnotherUserIsRefused() {
        var machine = Self.open()
        _ = machine.frame(text(#"{"op":"auth","id":1,"token":"t"}"#), now: Self.noon)
        let bob = Grant(
            user: UserID(validating: "bob")!, role: .user(UserID(validating: "bob")!),
            expires: Self.noon / 1_000 + 7_200)
        #expect(
            machine.tokenChecked(bob, now: Self.noon)
                == .refuse(reason: "a fresh token must be for the same user (alice)", requestID: .number("1")))
        _ = machine.frame(text(#"{"op":"auth","id":2,"token":"t"}"#), now: Self.noon)
        #expect(
            machine.tokenChecked(nil, now: Self.noon)
                == .refuse(reason: "the token was refused; the old one still holds", requestID: .number("2")))
        #expect(machine.expiry(now: Self.noon) == .wait(milliseconds: 600_000))
    }

    /// Without tokens, an `auth` is answered `bad_request`, not checked.
    @Test func authWithoutTokensIsABadRequest() {
        var machine = Self.open(tokens: false)
        let action = machine.frame(text(#"{"op":"auth","id":1,"token":"t"}"#), now: Self.noon)
        guard case .message(.forward(.failure(let rejection))) = action else {
            Issue.record("\(action)")
            return
        }
        #expect(rejection.error.code == .badRequest)
        #expect(machine.expiry(now: Self.noon) == .none)
    }

    /// Reading stops while the loop holds as many requests as it may, and resumes when it answers one.
    @Test func readingStopsWhileTheLoopIsFull() {
        var machine = Self.open()
        #expect(machine.readWanted() == true)
        machine.requestCounted(full: true)
        #expect(machine.readWanted() == false)
        #expect(machine.requestsAnswered() == true)
        #expect(machine.requestsAnswered() == false)
        #expect(machine.readWanted() == true)
    }

    /// The token expires on the moved clock: the timer looks again if early, then closes with 4001, and a message
    /// read at or after the expiry is not handed on.
    @Test func tokenExpiryClosesWith4001() {
        var machine = Self.open(expiresIn: 60)
        #expect(machine.expiry(now: Self.noon) == .wait(milliseconds: 60_000))
        #expect(machine.expiryDue(now: Self.noon + 59_999) == .wait(milliseconds: 1))
        #expect(machine.frame(text(#"{"op":"ping"}"#), now: Self.noon + 60_000) == .message(.nothing))
        #expect(machine.expiryDue(now: Self.noon + 60_000) == .close(code: 4001, reason: "token expired"))
        #expect(machine.expiryDue(now: Self.noon + 60_001) == .none)
    }

    /// An expiry centuries away is looked at again a day later, not scheduled past what a timer holds.
    @Test func farExpiryWaitsADayAtMost() {
        let machine = Self.open(expiresIn: 1_000_000_000_000)
        #expect(machine.expiry(now: Self.noon) == .wait(milliseconds: 86_400_000))
    }

    /// A stopping server closes an open connection through the loop with 1001, once.
    @Test func stoppingClosesWith1001() {
        var machine = Self.open()
        #expect(machine.serverStopping() == .closeThroughLoop(code: 1001, reason: "the broker is stopping"))
        #expect(machine.serverStopping() == .none)
        #expect(machine.loopCloses(code: 1001, reason: "stop") == .sendClose(code: 1001, reason: "stop"))
    }

    /// A decoder error closes with 1009 for a frame too large, 1002 otherwise, and the end is reported once.
    @Test func decoderErrorsAndEnd() {
        var large = Self.open()
        #expect(large.decoderFailed(tooLarge: true) == .closeWith(code: 1009))
        #expect(large.decoderFailed(tooLarge: false) == .closeConnection)
        #expect(large.ended() == true)
        #expect(large.ended() == false)
        var malformed = Self.open()
        #expect(malformed.decoderFailed(tooLarge: false) == .closeWith(code: 1002))
    }
}

/// A masked client frame (the zero mask, so the payload reads as given).
func frame(_ opcode: WebSocketOpcode, _ bytes: [UInt8], fin: Bool = true) -> WebSocketFrame {
    WebSocketFrame(
        fin: fin, opcode: opcode, maskKey: WebSocketMaskingKey([0, 0, 0, 0]), data: ByteBuffer(bytes: bytes))
}

func frame(_ opcode: WebSocketOpcode, _ text: String, fin: Bool = true) -> WebSocketFrame {
    frame(opcode, Array(text.utf8), fin: fin)
}

func text(_ text: String) -> WebSocketFrame { frame(.text, text) }

func close(_ payload: [UInt8]) -> WebSocketFrame { frame(.connectionClose, payload) }
