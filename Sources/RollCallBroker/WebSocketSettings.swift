/// The WebSocket front door (`--ws-*`, docs/websocket.md): where it listens, how tokens are checked, and its bounds.
/// The endpoint itself runs in RollCallGateway; the loop needs the bounds.
public struct WebSocketSettings: Sendable {
    /// `HOST:PORT` of the WebSocket endpoint (`/v1/ws`); `nil` leaves it off.
    public var endpoint: String?
    /// How often the server pings each WebSocket; a connection that has not answered the previous ping by the next
    /// one is closed, so a peer that vanished without a FIN is closed within twice this. Range: 100...3_600_000.
    public var pingMilliseconds: Int64 = 10_000
    /// Open WebSocket connections; an upgrade past it is answered 503. Range: 1...10_000_000.
    public var maxConnections = 10_000
    /// Topics one WebSocket connection may subscribe to. Range: 1...1_000_000.
    public var maxSubscriptions = 1_000
    /// Bytes of replies and updates queued for one WebSocket connection; a connection over it is closed with 4008,
    /// so that one that cannot keep up slows no one. Range: 65_536...1_073_741_824, and at least
    /// `--max-reply-bytes` plus a group message.
    public var sendQueueBytes = 1_048_576
    /// How long an accepted connection may take to be upgraded (its whole upgrade request, and the token's check);
    /// one that has not been by then is closed, so that a client that sends nothing, or half a request, holds its
    /// socket and buffers no longer. Range: 100...600_000.
    public var handshakeMilliseconds: Int64 = 10_000
    /// Accepted connections not yet upgraded (within `handshakeMilliseconds`); one past it is closed at once, so that
    /// a flood of connections that never finish their upgrade holds at most this many sockets and buffers.
    /// Range: 1...1_000_000.
    public var maxPendingUpgrades = 1_000
    /// The key that signs tokens: an HMAC secret, a PEM public key, or a JWKS file, re-read on SIGHUP; `nil` and no
    /// ``jwtJwksURL``: no tokens, and the endpoint must be loopback (everyone may do everything) unless `--insecure`.
    public var jwtKeyFile: String?
    /// An identity provider's JWKS URL (`http://` or `https://`; `http://` to a loopback host only, unless
    /// `--insecure`): its keys sign tokens too, fetched at start and refreshed (docs/websocket.md, Tokens).
    public var jwtJwksURL: String?
    /// The longest a token may live: `exp` at most this many seconds after `iat` (or after now). Range:
    /// 60...31_536_000 (a year); there is no "unlimited", so that a leaked token always stops working.
    public var jwtMaxLifetimeSeconds: Int64 = 86_400
    /// The `iss` every token must carry, if set.
    public var jwtIssuer: String?
    /// The `aud` every token must carry (one of), if set.
    public var jwtAudience: String?
    /// A PEM certificate chain and its private key: the endpoint speaks TLS (`wss://`). Both or neither.
    public var tlsCertFile: String?
    public var tlsKeyFile: String?

    public init() {}

    /// Requests one WebSocket connection may have in the loop at once: reading stops while it has more.
    public static let maxRequestsInFlight = 64

    /// The ranges of the numeric settings.
    public enum Range {
        public static let pingMilliseconds: ClosedRange<Int64> = 100...3_600_000
        public static let maxConnections: ClosedRange<Int> = 1...10_000_000
        public static let maxSubscriptions: ClosedRange<Int> = 1...1_000_000
        public static let sendQueueBytes: ClosedRange<Int> = 65_536...1_073_741_824
        public static let handshakeMilliseconds: ClosedRange<Int64> = 100...600_000
        public static let maxPendingUpgrades: ClosedRange<Int> = 1...1_000_000
        public static let jwtMaxLifetimeSeconds: ClosedRange<Int64> = 60...31_536_000
    }
}
