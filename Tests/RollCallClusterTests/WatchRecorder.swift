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
    ) async throws {
        let deadline = ContinuousClock.now + timeout
        while !condition(all) {
            guard ContinuousClock.now < deadline else {
                throw ClusterTestFailure("no \(what) within \(timeout); updates: \(all)")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }
}

/// Every test that starts etcd, one at a time (each starts three etcd members). The tests are async and wait with
/// `Task.sleep`, and what blocks for long (starting etcd, waiting out an election) runs on a thread of its own
/// (``offThread(_:)``): Swift Testing runs tests on the few threads shared with every async test (two on a two-core
/// machine), and blocking them starved the rest of the suite (seen: a waker test's 50 ms task delayed past 5 s).
@Suite(.serialized) enum EtcdBacked {}

struct ClusterTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs blocking work on a thread of its own and waits for it without holding one of Swift Concurrency's shared
/// threads. No expectations inside: they belong to the test's own task.
func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

extension EtcdCluster {
    /// A three-member cluster, started off the shared threads.
    static func started() async throws -> EtcdCluster {
        try await offThread { try EtcdCluster() }
    }

    /// A client of every member, with `timeout` per attempt.
    func client(timeout: Duration = .seconds(1)) -> EtcdClient {
        EtcdClient(endpoints: EtcdEndpoint.list(clusterURL)!, requestTimeout: timeout)
    }

    /// A client of the first member alone (no other to move to), with `timeout` per attempt.
    func clientOfFirstMember(timeout: Duration) -> EtcdClient {
        EtcdClient(endpoints: [EtcdEndpoint(host: "127.0.0.1", port: members[0].clientPort)], requestTimeout: timeout)
    }
}
