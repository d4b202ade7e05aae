import ArgumentParser
import Foundation
import RollCallBroker

/// `rollcall serve`'s WebSocket options (docs/websocket.md).
struct WebSocketOptions: ParsableArguments {
    @Option(
        help:
            "HOST:PORT for the WebSocket endpoint /v1/ws (0: a free port). Env: ROLLCALL_WS_ENDPOINT. Default: off.")
    var wsEndpoint: String?

    @Option(
        help:
            "Ping interval on every WebSocket, ms; one that misses a pong is closed. Env: ROLLCALL_WS_PING_MS. Default: \(defaults.webSocket.pingMilliseconds)."
    )
    var wsPingMs: Int64?

    @Option(
        help:
            "Open WebSocket connections at most. Env: ROLLCALL_WS_MAX_CONNECTIONS. Default: \(defaults.webSocket.maxConnections)."
    )
    var wsMaxConnections: Int?

    @Option(
        help:
            "Topics one WebSocket may subscribe to. Env: ROLLCALL_WS_MAX_SUBSCRIPTIONS. Default: \(defaults.webSocket.maxSubscriptions)."
    )
    var wsMaxSubscriptions: Int?

    @Option(
        help:
            "Bytes queued for one WebSocket before it is closed as too slow (4008). Env: ROLLCALL_WS_SEND_QUEUE_BYTES. Default: \(defaults.webSocket.sendQueueBytes)."
    )
    var wsSendQueueBytes: Int?

    @Option(
        help:
            "Time an accepted connection has to be upgraded to a WebSocket, ms; then it is closed. Env: ROLLCALL_WS_HANDSHAKE_TIMEOUT_MS. Default: \(defaults.webSocket.handshakeMilliseconds)."
    )
    var wsHandshakeTimeoutMs: Int64?

    @Option(
        help:
            "Connections waiting for their WebSocket upgrade at most; one more is closed at once. Env: ROLLCALL_WS_MAX_PENDING_UPGRADES. Default: \(defaults.webSocket.maxPendingUpgrades)."
    )
    var wsMaxPendingUpgrades: Int?

    @Option(
        help:
            "HMAC secret, PEM public key or JWKS file that signs WebSocket tokens; SIGHUP re-reads it. Env: ROLLCALL_JWT_KEY_FILE. Default: none (loopback only, no tokens)."
    )
    var jwtKeyFile: String?

    @Option(
        name: .customLong("jwt-jwks-url"),
        help:
            "An identity provider's JWKS URL whose keys sign WebSocket tokens too; fetched at start, refreshed per Cache-Control (60 s to 1 h) and on an unknown kid. Env: ROLLCALL_JWT_JWKS_URL. Default: none."
    )
    var jwtJwksUrl: String?

    @Option(
        name: .customLong("jwt-max-lifetime-s"),
        help:
            "A token's exp at most this many seconds after its iat (or now); 60 to 31536000. Env: ROLLCALL_JWT_MAX_LIFETIME_S. Default: \(defaults.webSocket.jwtMaxLifetimeSeconds)."
    )
    var jwtMaxLifetimeS: Int64?

    @Option(help: "The iss every token must carry. Env: ROLLCALL_JWT_ISSUER. Default: not checked.")
    var jwtIssuer: String?

    @Option(help: "An aud every token must carry. Env: ROLLCALL_JWT_AUDIENCE. Default: not checked.")
    var jwtAudience: String?

    @Option(
        help:
            "PEM certificate chain: the WebSocket endpoint speaks TLS (wss://). Env: ROLLCALL_WS_TLS_CERT_FILE. Default: none."
    )
    var wsTlsCertFile: String?

    @Option(help: "PEM private key of --ws-tls-cert-file. Env: ROLLCALL_WS_TLS_KEY_FILE. Default: none.")
    var wsTlsKeyFile: String?

    /// Puts the options into `c`.
    func apply(to c: inout BrokerConfiguration) throws {
        let environment = ProcessInfo.processInfo.environment
        func optional(_ flag: String?, _ variable: String) -> String? {
            flag ?? environment[variable].flatMap { $0.isEmpty ? nil : $0 }
        }
        c.webSocket.endpoint = optional(wsEndpoint, "ROLLCALL_WS_ENDPOINT")
        c.webSocket.pingMilliseconds = try setting(
            wsPingMs, "ROLLCALL_WS_PING_MS", default: c.webSocket.pingMilliseconds)
        c.webSocket.maxConnections = try setting(
            wsMaxConnections, "ROLLCALL_WS_MAX_CONNECTIONS", default: c.webSocket.maxConnections)
        c.webSocket.maxSubscriptions = try setting(
            wsMaxSubscriptions, "ROLLCALL_WS_MAX_SUBSCRIPTIONS", default: c.webSocket.maxSubscriptions)
        c.webSocket.sendQueueBytes = try setting(
            wsSendQueueBytes, "ROLLCALL_WS_SEND_QUEUE_BYTES", default: c.webSocket.sendQueueBytes)
        c.webSocket.handshakeMilliseconds = try setting(
            wsHandshakeTimeoutMs, "ROLLCALL_WS_HANDSHAKE_TIMEOUT_MS", default: c.webSocket.handshakeMilliseconds)
        c.webSocket.maxPendingUpgrades = try setting(
            wsMaxPendingUpgrades, "ROLLCALL_WS_MAX_PENDING_UPGRADES", default: c.webSocket.maxPendingUpgrades)
        c.webSocket.jwtKeyFile = optional(jwtKeyFile, "ROLLCALL_JWT_KEY_FILE")
        c.webSocket.jwtJwksURL = optional(jwtJwksUrl, "ROLLCALL_JWT_JWKS_URL")
        c.webSocket.jwtMaxLifetimeSeconds = try setting(
            jwtMaxLifetimeS, "ROLLCALL_JWT_MAX_LIFETIME_S", default: c.webSocket.jwtMaxLifetimeSeconds)
        c.webSocket.jwtIssuer = optional(jwtIssuer, "ROLLCALL_JWT_ISSUER")
        c.webSocket.jwtAudience = optional(jwtAudience, "ROLLCALL_JWT_AUDIENCE")
        c.webSocket.tlsCertFile = optional(wsTlsCertFile, "ROLLCALL_WS_TLS_CERT_FILE")
        c.webSocket.tlsKeyFile = optional(wsTlsKeyFile, "ROLLCALL_WS_TLS_KEY_FILE")
    }
}
