import Synchronization
import ZeroMQ

/// Work that other threads (the HTTP endpoint today) hand to the event loop, the only thread that may touch the
/// core: each job runs on the loop's thread during its next round, and answers through its own continuation. The
/// loop is woken for it; it never waits for the thread that posted.
final class LoopMailbox: Sendable {
    private let jobs = Mutex<[@Sendable (EventLoop) -> Void]>([])
    private let waker: Waker

    init(waker: Waker) { self.waker = waker }

    /// Wakes the loop without a job (the store writer wants the whole state).
    func wake() { waker.wake() }

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
