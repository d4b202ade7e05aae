import Foundation
import RollCallCluster
import RollCallTestSupport
import Synchronization
import Testing

/// Collects what a watch reports, for tests to wait on with a deadline.
final class WatchRecorder: Sendable {
    private let updates = Mutex<[EtcdWatch.Update]>([])

    func record(_ update: EtcdWatch.Update) { updates.withLock { $0.append(update) } }

    var all: [EtcdWatch.Update] { updates.withLock { $0 } }

    /// Every event delivered so far, in order.
    var events: [EtcdEvent] {
        all.flatMap { update -> [EtcdEvent] in
            if case .events(let events) = update { return events }
            return []
        }
    }

    /// Waits until `condition` holds of the updates so far; throws after `timeout`.
    func wait(
        for what: String, timeout: Duration = .seconds(10), _ condition: ([EtcdWatch.Update]) -> Bool
    ) throws {
        let deadline = ContinuousClock.now + timeout
        while !condition(all) {
            guard ContinuousClock.now < deadline else {
                throw ClusterTestFailure("no \(what) within \(timeout); updates: \(all)")
            }
            Thread.sleep(forTimeInterval: 0.002)
        }
    }
}

/// Every test that starts etcd, one at a time: each starts three etcd members and blocks its thread while it waits
/// on them, and Swift Testing runs synchronous tests on the few threads shared with every async test (two on a
/// two-core machine), so a dozen of them at once would starve the rest of the suite (seen: a waker test's 50 ms task
/// delayed past 5 s).
@Suite(.serialized) enum EtcdBacked {}

struct ClusterTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension EtcdCluster {
    /// A client of every member, with `timeout` per attempt.
    func client(timeout: Duration = .seconds(1)) -> EtcdClient {
        EtcdClient(endpoints: EtcdEndpoint.list(clusterURL)!, requestTimeout: timeout)
    }
}
