import Foundation
import Logging
import RollCallBroker
import RollCallCore
import RollCallWebhooks
import Synchronization

/// What ties webhook delivery to the broker (docs/webhooks.md): the store writer's "log committed" and the test
/// clock's moves wake the delivery, which is made after the broker that calls them.
final class WebhookWakeUp: Sendable {
    private let delivery = Mutex<WebhookDelivery?>(nil)
    /// The broker's time as test mode's clock last said; `nil` on the real clock.
    private let testTime = Mutex<BrokerTime?>(nil)

    /// Wakes the delivery, once there is one; a lock and a return (the store writer's and the loop's threads call it).
    func notify() { delivery.withLock { $0 }?.notify() }

    /// The broker's clock, for `presence.offline_for`: test mode's (followed through `signal`, each move waking
    /// the delivery), else the wall clock in milliseconds, which the broker's own clock follows.
    func brokerNow() -> BrokerTime {
        testTime.withLock { $0 } ?? BrokerTime(milliseconds: Int64(Date().timeIntervalSince1970 * 1000))
    }

    /// Makes the delivery for `configuration` over `broker`'s presence log, and wakes it from then on.
    /// `writeInterval` is the broker's `--write-interval-ms`: how late a transition may reach the log.
    func start(
        _ configuration: WebhookConfiguration, broker: Broker, cluster: ClusterSettings?, writeInterval: Int64,
        logger: Logger
    ) throws(ConfigurationError) -> WebhookDelivery {
        guard let log = broker.presenceLog else {
            throw ConfigurationError(
                "--webhook-url", "needs the presence log: a data directory and --history-retention-ms above 0")
        }
        if let signal = broker.gateway.testClock {
            let now = signal.observe { [self] time in
                testTime.withLock { $0 = time }
                notify()
            }
            testTime.withLock { $0 = max($0 ?? now, now) }
        }
        let sqlite = SQLiteWebhookLog(log: log)
        // On a node of a cluster the cursors are the cluster's, in etcd, with one node delivering each URL.
        let cursors: any WebhookCursorStore =
            cluster.map { settings in
                ClusterWebhookCursors(settings: settings) { [weak broker] in broker?.servingIncarnation }
            } ?? sqlite
        let delivery = WebhookDelivery(
            configuration: configuration, source: sqlite, cursors: cursors, logger: logger,
            brokerNow: { [weak self] in self?.brokerNow() ?? BrokerTime(milliseconds: 0) },
            // A transition reaches the log within one write interval (and a write's time) of being made; on a
            // cluster, after etcd and the watch too, which a node outside its window stops waiting for at a third of
            // its lease, and a lost node's end after its stamp (a second at most).
            offlineSettle: writeInterval + 1_000 + (cluster.map { $0.leaseMilliseconds / 3 + 1_000 } ?? 0))
        self.delivery.withLock { $0 = delivery }
        return delivery
    }
}
