import Metrics
import RollCallCore
import RollCallWire

/// The broker's metrics through the swift-metrics API; the executable chooses the backend (Prometheus). Every handle
/// is made once, so that the loop only increments, sets and records: no look-up by label on the hot path.
final class BrokerMetrics {
    /// Counters by op (the index of ``opNames``) and result (`ok`, then each error code in order), made on first use.
    private var requests: [[Counter?]] = Array(
        repeating: Array(repeating: nil, count: 1 + ErrorCode.allCases.count), count: opNames.count)
    private static let opNames = [
        "hello", "heartbeat", "status", "bye", "query", "ping", "group", "ungroup", "advance", "history", "events",
        "privacy", "contacts", "block", "invalid",
    ]
    private static let resultNames = ["ok"] + ErrorCode.allCases.map(\.rawValue)
    private static let resultIndex = Dictionary(
        uniqueKeysWithValues: ErrorCode.allCases.enumerated().map { ($0.element, $0.offset + 1) })
    private let presenceUpdates = Counter(label: "rollcall_updates_published_total", dimensions: [("kind", "presence")])
    private let groupUpdates = Counter(label: "rollcall_updates_published_total", dimensions: [("kind", "group")])
    private let brokerUpdates = Counter(label: "rollcall_updates_published_total", dimensions: [("kind", "broker")])
    /// One counter per reason, made at start so that each is exported at 0 before the first session ends
    /// (Prometheus' convention: `rate()` and `increase()` then see the first end).
    private let sessionsEnded: [OfflineReason: Counter] = Dictionary(
        uniqueKeysWithValues: OfflineReason.allCases.map {
            ($0, Counter(label: "rollcall_sessions_ended_total", dimensions: [("reason", $0.rawValue)]))
        })
    private var sessionsEndedReported: [OfflineReason: UInt64] = [:]
    private let refusedConnections = Counter(label: "rollcall_connections_refused_total")
    private let slowWebSockets = Counter(label: "rollcall_websockets_closed_slow_total")
    private let handshakesRefused = Counter(label: "rollcall_handshakes_refused_total")
    private let subscriptionsRefused = Counter(label: "rollcall_subscriptions_refused_total")
    private let sessions = Gauge(label: "rollcall_sessions")
    private let usersAvailable = Gauge(label: "rollcall_users_available")
    private let connections = Gauge(label: "rollcall_connections")
    private let groups = Gauge(label: "rollcall_groups")
    private let subscriptions = Gauge(label: "rollcall_subscriptions")
    private let pendingChanges = Gauge(label: "rollcall_store_pending_changes")
    /// How long one loop round's work takes (not its wait).
    let loopIteration = Timer(label: "rollcall_loop_iteration_seconds")

    /// One request answered: its op (`nil` when the body did not decode: `invalid`), and `nil` for `ok` or the
    /// error code. Two array indexes, no hashing of strings: this runs for every request.
    func request(_ request: Request?, failed code: ErrorCode?) {
        let op = request.map(Self.opIndex) ?? Self.opNames.count - 1
        let result = code.map { Self.resultIndex[$0] ?? 0 } ?? 0
        if let counter = requests[op][result] {
            counter.increment()
        } else {
            let counter = Counter(
                label: "rollcall_requests_total",
                dimensions: [("op", Self.opNames[op]), ("result", Self.resultNames[result])])
            requests[op][result] = counter
            counter.increment()
        }
    }

    private static func opIndex(_ request: Request) -> Int {
        switch request {
        case .hello: 0
        case .heartbeat: 1
        case .status: 2
        case .bye: 3
        case .query, .queryAt: 4
        case .ping: 5
        case .group: 6
        case .ungroup: 7
        case .advance: 8
        case .history: 9
        case .events: 10
        case .privacy: 11
        case .contacts: 12
        case .block: 13
        }
    }

    /// A connection closed at once, past `--max-connections`.
    func refusedConnection() { refusedConnections.increment() }

    /// A WebSocket connection closed because its send queue went over its bound.
    func closedSlowWebSocket() { slowWebSockets.increment() }

    /// A CURVE handshake refused by the ZAP handler: the client's key is not in the authorized-keys table.
    func refusedHandshake() { handshakesRefused.increment() }

    /// A subscription the key may not make, not applied.
    func refusedSubscription() { subscriptionsRefused.increment() }

    /// One message published on the update socket.
    func published(_ topic: Topic) {
        switch topic {
        case .presence: presenceUpdates.increment()
        case .group: groupUpdates.increment()
        case .broker: brokerUpdates.increment()
        }
    }

    enum Topic { case presence, group, broker }

    /// The gauges and the session-end counters, from the broker's state now. `core` holds this broker's sessions;
    /// `published` the records and groups it publishes (on a node of a cluster, the cluster's: EventLoop+Cluster).
    func update(
        core: PresenceCore, published: PresenceCore, connections connectionCount: Int, subscriptions topicCount: Int
    ) {
        sessions.record(core.sessionCount)
        usersAvailable.record(published.availableUserCount)
        connections.record(connectionCount)
        groups.record(published.groupCount)
        subscriptions.record(topicCount)
        pendingChanges.record(core.pendingChangeCount)
        for (reason, total) in core.sessionsEnded {
            let delta = total - (sessionsEndedReported[reason] ?? 0)
            guard delta > 0 else { continue }
            sessionsEnded[reason]?.increment(by: Int64(delta))
            sessionsEndedReported[reason] = total
        }
    }
}
