import RollCallCore
import RollCallSecurity
import RollCallStore

#if canImport(Glibc)
    import Glibc
#endif

/// Everything `rollcall serve` can be told, with the documented defaults.
public struct BrokerConfiguration: Sendable {
    /// The ROUTER endpoint clients send requests to.
    public var commandEndpoint = "tcp://127.0.0.1:7730"
    /// The XPUB endpoint updates are published on.
    public var updateEndpoint = "tcp://127.0.0.1:7731"
    /// Sessions, liveness and limits.
    public var presence = PresenceCore.Configuration()
    /// The largest request body processed; larger ones are answered `too_large`.
    public var maxMessageBytes = 65_536
    /// Updates queued in libzmq per subscriber. A subscriber at this mark holds back the updates it subscribes to
    /// (the broker queues them, see ``updateQueueBytes``) for up to ``updateStallMilliseconds``; then it misses
    /// them. Range: 1...1_000_000.
    public var updateHighWaterMark: Int32 = 10_000
    /// The longest an update waits for a full subscriber: then the broker sends it past full subscribers, which
    /// miss it (the heartbeat's `dropped` counts it), and libzmq leaves them out until they have read half their
    /// queue. Range: 1...60_000.
    public var updateStallMilliseconds: Int64 = 1_000
    /// The most bytes of updates the broker holds while subscribers are full; beyond it the oldest go out at once,
    /// lossily, as after a stall. Range: 65_536...4_294_967_296.
    public var updateQueueBytes = 67_108_864
    /// Where the state is kept across restarts.
    public var storage: Storage = .none
    /// How often changes are handed to the store: at most this much is lost when the broker is killed.
    public var writeIntervalMilliseconds: Int64 = 200
    /// How long the presence log keeps transitions (docs/history.md): 7 days; 0 keeps no log. Only with a data
    /// directory, and not on a node of a cluster.
    public var historyRetentionMilliseconds: Int64 = 604_800_000
    /// Whether transitions go out before the presence log has committed them (`--publish-before-commit`): by default
    /// publications wait for the commit, so that nothing a subscriber saw can be lost from the log (docs/history.md).
    public var publishesBeforeCommit = false
    /// Tests only (`@testable`): runs on the log's reader thread before each read, so that a test can hold a read.
    var logReadHook: (@Sendable () -> Void)?
    /// How often the broker publishes its own heartbeat on `broker/`.
    public var brokerHeartbeatMilliseconds: Int64 = 1_000
    /// The broker's id, as `ping` answers it.
    public var brokerID = hostName()
    /// Test mode: the broker's clock moves only through `advance` requests, so tests reach TTLs, grace periods and
    /// batch windows without waiting. Loopback endpoints only, ephemeral unless given a data directory; never for
    /// production.
    public var testMode = false
    /// The largest reply body the broker sends, in bytes: longer `group` and `query` answers are paged
    /// (docs/protocol.md §6.5, §6.7). With ``commandHighWaterMark`` it bounds what one connection that never reads
    /// its replies can make the broker hold. Range: 16_384...16_777_216.
    public var maxReplyBytes = 65_536
    /// Replies queued per command connection before further replies to it are dropped (the ROUTER's `ZMQ_SNDHWM`,
    /// counted in messages). It must stay above twice the requests a client pipelines (the benchmark keeps 400 in
    /// flight). Range: 1...1_000_000.
    public var commandHighWaterMark: Int32 = 1_000
    /// How often the broker sends a ZMTP PING on every command and update connection, in ms; 0 turns connection
    /// heartbeats off. Range: 0...3_600_000.
    public var connectionHeartbeatMilliseconds: Int32 = 10_000
    /// How long after a PING a connection may stay silent before the broker closes it, in ms: a peer whose
    /// network vanished without a FIN is gone within `connectionHeartbeatMilliseconds` plus this.
    /// Range: 1...3_600_000.
    public var connectionHeartbeatTimeoutMilliseconds: Int32 = 20_000
    /// Sent to peers in every PING: a peer that hears nothing from the broker for this long closes the connection
    /// (and a ZeroMQ client reconnects). libzmq sends it in tenths of a second; 0 sends none. Range: 0...6_553_500.
    public var connectionHeartbeatTTLMilliseconds: Int32 = 60_000
    /// Connections on the command endpoint; a connection past it is closed as soon as it is accepted (libzmq
    /// cannot refuse one), so that what every connection can cost adds up to a bound. The default stays below the
    /// systemd unit's `LimitNOFILE=65536`. Range: 1...10_000_000.
    public var maxConnections = 60_000
    /// The WebSocket front door (docs/websocket.md); off unless ``WebSocketSettings/endpoint`` is set.
    public var webSocket = WebSocketSettings()
    /// CurveZMQ on both endpoints (docs/security.md); `nil` for the NULL mechanism, where every peer may do
    /// everything.
    public var curve: CurveSettings?
    /// Whether a non-loopback endpoint may be bound without authentication (CURVE, or tokens and TLS on the
    /// WebSocket endpoint) (`--insecure`): refused otherwise.
    public var insecure = false
    /// A node of a cluster on etcd (docs/cluster.md); `nil` for a single broker, the default. A node keeps its state
    /// in etcd, not in a data directory.
    public var cluster: ClusterSettings?
    /// The app backend's social graph (`--contacts-file`, docs/privacy.md): one `user: contact, contact, …` per
    /// line, read at start and again on SIGHUP; `nil`: contacts come only from op `contacts`.
    public var contactsFile: String?

    public init() {}

    /// Frames larger than this are refused by libzmq itself, which drops the connection without reading them:
    /// bad clients cannot make the broker buffer more than this per frame.
    public var hardFrameLimit: Int64 { Int64(maxMessageBytes) * 4 }

    /// The largest subscription frame the update endpoint accepts: the subscribe byte and the longest valid topic
    /// (`presence/` and a 128-byte user id and `/`, 139 bytes) fit. libzmq drops a peer that sends a longer one
    /// before reading it, so no subscription longer than any topic is ever held.
    public static let maxSubscriptionBytes: Int64 = 256

    /// The same limit with CURVE, where libzmq applies it to the handshake's commands too: a client's INITIATE
    /// (its vouch and metadata) takes about 300 bytes, and a limit below that refuses every subscriber.
    public static let maxCurveSubscriptionBytes: Int64 = 1_024

    /// With CURVE, the longest a connection may take to finish its handshake before it is closed.
    public static let curveHandshakeMilliseconds: Int32 = 5_000

    /// The largest group message body the broker publishes: a group's changes beyond it go out as several messages
    /// (docs/groups.md). A stalled subscriber costs at most ``updateHighWaterMark`` times this.
    public static let maxGroupMessageBytes = 16_384

    /// The shortest time between two last values (or heartbeats on subscribe) on one topic: subscriptions that come
    /// faster share one.
    public static let replayIntervalMilliseconds: Int64 = 100
}

/// The broker's CurveZMQ identity and who may connect (`--curve-secret-key-file`, `--authorized-keys`).
public struct CurveSettings: Sendable {
    /// The broker's secret key, 40 Z85 characters; clients need its public key.
    public var secretKey: String
    /// The keys that may connect, with their roles.
    public var authorizedKeys: AuthorizedKeys
    /// Where the table was read from, for reloads on SIGHUP; `nil` for a table given in code.
    public var authorizedKeysPath: String?

    public init(secretKey: String, authorizedKeys: AuthorizedKeys, authorizedKeysPath: String? = nil) {
        self.secretKey = secretKey
        self.authorizedKeys = authorizedKeys
        self.authorizedKeysPath = authorizedKeysPath
    }
}

/// Where a broker keeps its state across restarts.
public enum Storage: Sendable {
    /// Nowhere: a restart forgets everything (`--ephemeral`).
    case none
    /// A SQLite database in this directory (`--data-dir`).
    case directory(String)
    /// A store of the caller's, such as a `MemoryStore` shared by brokers started one after the other in a test.
    case store(any PresenceStore)
}

/// The RollCall version.
public let rollCallVersion = "0.1.0"

func hostName() -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    guard gethostname(&buffer, buffer.count) == 0 else { return "rollcall" }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
