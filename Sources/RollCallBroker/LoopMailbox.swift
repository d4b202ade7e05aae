import RollCallCore
import RollCallWire
import Synchronization
import ZeroMQ

/// Work that other threads (the HTTP endpoint today) hand to the event loop, the only thread that may touch the
/// core: each job runs on the loop's thread during its next round, and answers through its own continuation. The
/// loop is woken for it; it never waits for the thread that posted.
final class LoopMailbox: Sendable {
    private let jobs = Mutex<[@Sendable (EventLoop) -> Void]>([])
    private let waker: Waker

    init(waker: Waker) { self.waker = waker }

    /// Queues `job` for the loop's next round and wakes it.
    func post(_ job: @escaping @Sendable (EventLoop) -> Void) {
        jobs.withLock { $0.append(job) }
        waker.wake()
    }

    /// The jobs queued so far, for the loop to run.
    func take() -> [@Sendable (EventLoop) -> Void] {
        jobs.withLock { jobs in
            defer { jobs = [] }
            return jobs
        }
    }
}

/// When the loop last finished a round, for health checks from other threads.
final class LoopHeartbeat: Sendable {
    private let lastRound = Atomic<Int64>(0)
    private let start = ContinuousClock.now

    /// Milliseconds on a monotonic clock.
    var now: Int64 {
        let elapsed = ContinuousClock.now - start
        return elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000
    }

    func beat() { lastRound.store(now, ordering: .relaxed) }

    /// Milliseconds since the loop last finished a round; `nil` before its first.
    var sinceLastRound: Int64? {
        let last = lastRound.load(ordering: .relaxed)
        return last == 0 ? nil : now - last
    }
}

/// One user as the status page shows it: the record, and the groups the user is in.
public struct UserView: Sendable, Equatable {
    public var record: PresenceRecord
    public var groups: [GroupID]
}

/// The broker's state at a glance, for the status page.
public struct BrokerStatus: Sendable {
    public var broker: String
    public var epoch: String
    public var time: BrokerTime
    public var sessions: Int
    public var usersAvailable: Int
    public var connections: Int
    public var groups: Int
    public var subscriptions: Int
    /// Messages published on the update socket since the start: a rate is the difference of two readings.
    public var published: UInt64
    /// The latest records published, newest last (at most ``EventLoop/recentLimit``).
    public var recent: [PresenceRecord]
}
