import NIOCore
import RollCallBroker
import RollCallCore
import RollCallWire

extension GatewayHandler {
    /// Every decision of one upgraded WebSocket connection, as a value: one mutating function per input (the upgrade,
    /// a read wanted, a frame, a token checked, a ping due, a pong written, frames waiting, the loop's close, the
    /// token's expiry, the server stopping, the end), each returning what the ``GatewayHandler`` shell must do. No
    /// channel, no timer and no clock: the time is a parameter (milliseconds since 1970, the clock of a token's
    /// `exp`), so tests drive it without sockets.
    struct StateMachine {
        /// The connection's life: each case holds only what that stage needs.
        enum State {
            /// Over the connection cap: a close frame was sent, nothing is read or handed on.
            case refused
            case open(Open)
            /// A close was asked of the loop (through the outbox) so that what it queued goes first: nothing more is
            /// handed on, and the close frame comes back as ``loopCloses(code:reason:)``.
            case closeRequested
            /// The close frame is out (ours, or the echo of the peer's): waiting for the peer's close or the cut.
            case closing
            case ended
        }

        /// An open connection.
        struct Open {
            /// The start of a fragmented message.
            var fragments: Fragments?
            /// An `auth` token being checked (its request id), while later messages wait in ``held``.
            var checking: Checking?
            var held: [[UInt8]] = []
            /// The loop has ``GatewayOutbox/maxInFlight`` of this connection's requests: no reading until it
            /// answers one.
            var requestsFull = false
            /// SwiftNIO asked for a read while reading was held back.
            var readWanted = false
            /// A ping was sent and nothing has come from the peer since.
            var awaitingPeer = false
            var pong = Pong.idle
            /// When the token expires, in seconds since 1970 (moved by `auth`); `.max` without tokens.
            var expires: Int64
        }

        struct Fragments {
            var message: ByteBuffer
            var isText: Bool
        }

        struct Checking {
            var requestID: JSON?
        }

        /// At most one pong on its way at a time, and the payload of the latest ping that came meanwhile (RFC 6455
        /// §5.5.3 lets an endpoint answer only the latest ping): a peer that pings and never reads holds one pong.
        enum Pong {
            case idle
            case inFlight(next: ByteBuffer?)
        }

        /// What the machine needs of the broker's settings.
        struct Limits {
            var maxConnections: Int
            var maxMessageBytes: Int
            var presence: PresenceCore.Configuration
            var maxTopics: Int
            /// Whether the server checks tokens (an `auth` request means something).
            var takesTokens: Bool
        }

        /// Changed only by the inputs (here and in GatewayHandler+Frames.swift).
        var state: State = .ended
        let limits: Limits
        /// The user of the token the connection was upgraded with; `nil` without tokens.
        let user: UserID?
        private let initialExpiry: Int64

        init(limits: Limits, grant: Grant?) {
            self.limits = limits
            user = grant?.user
            initialExpiry = grant?.expires ?? .max
        }

        // MARK: Life

        enum UpgradeAction: Equatable {
            /// Register with the loop and start the expiry timer.
            case open
            /// Send this close frame (arming the cut), and hand nothing to the loop.
            case refuse(code: UInt16, reason: String)
        }

        /// The connection was upgraded; `connections` counts it with the others of the server.
        mutating func upgraded(connections: Int) -> UpgradeAction {
            guard connections <= limits.maxConnections else {
                state = .refused
                return .refuse(code: GatewayCloseCode.unavailable, reason: "too many connections")
            }
            state = .open(Open(expires: initialExpiry))
            return .open
        }

        /// The connection is over, however it ended; `true` the first time only (the loop hears it once).
        mutating func ended() -> Bool {
            if case .ended = state { return false }
            state = .ended
            return true
        }

        enum StopAction: Equatable {
            /// Ask the loop to close (what it queued first, then the close frame).
            case closeThroughLoop(code: UInt16, reason: String)
            /// Close the TCP connection now.
            case closeConnection
            case none
        }

        /// The server is stopping: a close frame after what is queued, and the cut if the peer does not answer.
        mutating func serverStopping() -> StopAction {
            switch state {
            case .open:
                state = .closeRequested
                return .closeThroughLoop(code: 1001, reason: "the broker is stopping")
            case .refused: return .closeConnection
            case .closeRequested, .closing, .ended: return .none
            }
        }

        enum DecoderErrorAction: Equatable {
            /// Send a close frame with `code`, close the TCP connection once it is written, and arm the cut.
            case closeWith(code: UInt16)
            case closeConnection
        }

        /// SwiftNIO's frame decoder refused a frame: too large is 1009, malformed 1002; once closing, it just ends.
        mutating func decoderFailed(tooLarge: Bool) -> DecoderErrorAction {
            switch state {
            case .open, .closeRequested:
                state = .closing
                return .closeWith(code: tooLarge ? 1009 : 1002)
            case .refused, .closing, .ended: return .closeConnection
            }
        }

        // MARK: Reading

        /// SwiftNIO asks for a read: `true` to read now, `false` to hold it until the loop or the token check is done.
        mutating func readWanted() -> Bool {
            guard case .open(var open) = state, open.requestsFull || open.checking != nil else { return true }
            open.readWanted = true
            state = .open(open)
            return false
        }

        /// The shell counted one more request with the outbox; `full` if the connection now has as many in the loop
        /// as it may.
        mutating func requestCounted(full: Bool) {
            guard full, case .open(var open) = state else { return }
            open.requestsFull = true
            state = .open(open)
        }

        /// The loop answered enough of this connection's requests; `true` to read now.
        mutating func requestsAnswered() -> Bool {
            guard case .open(var open) = state else { return false }
            open.requestsFull = false
            state = .open(open)
            return releaseRead()
        }

        /// `true` (and the wish forgotten) if a read was held back and nothing holds it any more.
        private mutating func releaseRead() -> Bool {
            guard case .open(var open) = state, open.readWanted, !open.requestsFull, open.checking == nil else {
                return false
            }
            open.readWanted = false
            state = .open(open)
            return true
        }

        // MARK: Writing

        /// Whether frames the loop queued are written (`true`) or dropped, the close frame being out.
        var writes: Bool {
            switch state {
            case .open, .closeRequested: true
            case .refused, .closing, .ended: false
            }
        }

        enum LoopCloseAction: Equatable {
            /// Write what the loop queued, then this close frame, and arm the cut.
            case sendClose(code: UInt16, reason: String)
            case none
        }

        /// The loop closes the connection (its close, or the one asked of it through the outbox).
        mutating func loopCloses(code: UInt16, reason: String) -> LoopCloseAction {
            switch state {
            case .open, .closeRequested:
                state = .closing
                return .sendClose(code: code, reason: reason)
            case .refused, .closing, .ended: return .none
            }
        }

        // MARK: Pings

        enum PingAction: Equatable {
            case ping
            /// Nothing came since the previous ping: the peer vanished without a FIN; close the TCP connection.
            case cut
            case none
        }

        /// The ping interval came round: ping the peer, or cut one that has sent nothing since the previous ping.
        mutating func pingDue() -> PingAction {
            guard case .open(var open) = state else { return .none }
            if open.awaitingPeer { return .cut }
            open.awaitingPeer = true
            state = .open(open)
            return .ping
        }

        /// The pong on its way was written: the next one to send, if a ping came meanwhile.
        mutating func pongWritten() -> ByteBuffer? {
            guard case .open(var open) = state, case .inFlight(let next) = open.pong else { return nil }
            open.pong = next == nil ? .idle : .inFlight(next: nil)
            state = .open(open)
            return next
        }

        // MARK: Tokens

        enum TokenAction: Equatable {
            /// The fresh token holds: tell the loop (which answers the request) and move the expiry timer.
            case reauthorize(Grant, requestID: JSON?)
            /// Refused: the loop answers the request `forbidden` with `reason`; the old token stays.
            case refuse(reason: String, requestID: JSON?)
            case none
        }

        /// The `auth` token has been checked (`nil`: refused). Then take the messages that waited with
        /// ``nextHeld(now:)``, and read again if ``resumeAfterHeld()`` says so.
        mutating func tokenChecked(_ fresh: Grant?, now: Int64) -> TokenAction {
            guard case .open(var open) = state, let checking = open.checking else { return .none }
            open.checking = nil
            defer { state = .open(open) }
            if let fresh, fresh.user == user {
                open.expires = fresh.expires
                return .reauthorize(fresh, requestID: checking.requestID)
            }
            let reason =
                fresh == nil
                ? "the token was refused; the old one still holds"
                : "a fresh token must be for the same user (\(user?.rawValue ?? ""))"
            return .refuse(reason: reason, requestID: checking.requestID)
        }

        /// The next message that waited for a token check, decided as it would have been when it came; `nil` when
        /// none is left or another `auth` holds the rest.
        mutating func nextHeld(now: Int64) -> MessageAction? {
            guard case .open(var open) = state, open.checking == nil, !open.held.isEmpty else { return nil }
            let message = open.held.removeFirst()
            state = .open(open)
            return self.message(message, now: now)
        }

        /// After the held messages: `true` to read the read SwiftNIO asked for meanwhile.
        mutating func resumeAfterHeld() -> Bool { releaseRead() }

        enum ExpiryAction: Equatable {
            /// Look again in this many milliseconds.
            case wait(milliseconds: Int64)
            /// The token has expired: ask the loop to close with this code.
            case close(code: UInt16, reason: String)
            case none
        }

        /// When to look at the token's expiry, as of `now`: at most a day ahead (the timer looks again when it fires
        /// early), so that an `exp` centuries away does not overflow a timer.
        func expiry(now: Int64) -> ExpiryAction {
            guard user != nil, case .open(let open) = state else { return .none }
            let left = Double(open.expires) * 1_000 - Double(now)
            return .wait(milliseconds: Int64(min(max(0, left), 86_400_000)))
        }

        /// The expiry timer fired at `now`: close with 4001 if the token has expired, else wait again.
        mutating func expiryDue(now: Int64) -> ExpiryAction {
            guard user != nil, case .open(let open) = state else { return .none }
            guard Self.hasExpired(open.expires, now: now) else { return expiry(now: now) }
            state = .closeRequested
            return .close(code: GatewayCloseCode.tokenExpired, reason: "token expired")
        }

        /// The key that checked the token was taken away by a reload: `true` (and no more messages handed on) if the
        /// loop is to end the connection's sessions and close it (4003); `false` once it is closing anyway.
        mutating func revoked() -> Bool {
            guard case .open = state else { return false }
            state = .closeRequested
            return true
        }

        static func hasExpired(_ expires: Int64, now: Int64) -> Bool {
            Double(expires) * 1_000 <= Double(now)
        }
    }
}
