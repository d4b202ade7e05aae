import Metrics
import RollCallCore

/// The broker's metrics through the swift-metrics API; the executable chooses the backend (Prometheus). Every handle
/// is made once, so that the loop only increments, sets and records: no look-up by label on the hot path.
final class BrokerMetrics {
    private var requests: [RequestKey: Counter] = [:]
    private let presenceUpdates = Counter(label: "rollcall_updates_published_total", dimensions: [("kind", "presence")])
    private let groupUpdates = Counter(label: "rollcall_updates_published_total", dimensions: [("kind", "group")])
    private let brokerUpdates = Counter(label: "rollcall_updates_published_total", dimensions: [("kind", "broker")])
    private var sessionsEnded: [OfflineReason: Counter] = [:]
    private var sessionsEndedReported: [OfflineReason: UInt64] = [:]
    private let sessions = Gauge(label: "rollcall_sessions")
    private let usersAvailable = Gauge(label: "rollcall_users_available")
    private let connections = Gauge(label: "rollcall_connections")
    private let groups = Gauge(label: "rollcall_groups")
    private let subscriptions = Gauge(label: "rollcall_subscriptions")
    private let pendingChanges = Gauge(label: "rollcall_store_pending_changes")
    /// How long one loop round's work takes (not its wait).
    let loopIteration = Timer(label: "rollcall_loop_iteration_seconds")

    private struct RequestKey: Hashable {
        var op: String
        var result: String
    }

    /// One request answered: `op` (or `invalid` when the body did not decode) and `ok` or the error code.
    func request(op: String, result: String) {
        let key = RequestKey(op: op, result: result)
        if let counter = requests[key] {
            counter.increment()
        } else {
            let counter = Counter(label: "rollcall_requests_total", dimensions: [("op", op), ("result", result)])
            requests[key] = counter
            counter.increment()
        }
    }

    /// One message published on the update socket.
    func published(_ topic: Topic) {
        switch topic {
        case .presence: presenceUpdates.increment()
        case .group: groupUpdates.increment()
        case .broker: brokerUpdates.increment()
        }
    }

    enum Topic { case presence, group, broker }

    /// The gauges and the session-end counters, from the broker's state now.
    func update(core: PresenceCore, connections connectionCount: Int, subscriptions topicCount: Int) {
        sessions.record(core.sessionCount)
        usersAvailable.record(core.availableUserCount)
        connections.record(connectionCount)
        groups.record(core.groupCount)
        subscriptions.record(topicCount)
        pendingChanges.record(core.pendingChangeCount)
        for (reason, total) in core.sessionsEnded {
            let delta = total - (sessionsEndedReported[reason] ?? 0)
            guard delta > 0 else { continue }
            let counter =
                sessionsEnded[reason]
                ?? Counter(label: "rollcall_sessions_ended_total", dimensions: [("reason", reason.rawValue)])
            sessionsEnded[reason] = counter
            counter.increment(by: Int64(delta))
            sessionsEndedReported[reason] = total
        }
    }
}
