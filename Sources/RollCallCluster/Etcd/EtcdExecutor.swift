import DequeModule
import Foundation

/// A `TaskExecutor` on one thread of its own: the etcd client runs its gRPC tasks on it, and its blocking calls
/// wait for them with ``run(until:_:)``.
///
/// A blocking call that waited for a task on Swift Concurrency's shared pool (two threads on two cores) would need
/// a free thread of that pool to finish, and its caller may be one of them (a test's async function), or every one
/// of them may be such a caller: the call would wait for ever. The executor's own thread has nothing else to do.
/// Network I/O itself runs on NIO's event loops, as always.
final class EtcdExecutor: TaskExecutor, @unchecked Sendable {
    /// Guards `jobs` and `stopping`, and wakes the thread.
    private let condition = NSCondition()
    private var jobs = Deque<UnownedJob>()
    private var stopping = false

    /// `name`: the thread's, as `top -H` shows it (15 bytes at most).
    init(name: String) {
        let thread = Thread { [self] in
            nameThisThread(name)
            runJobs()
        }
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Ends the thread once it has run what is queued. Call it when no task of the executor can run again: the
    /// jobs enqueued after it never run.
    func stop() {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
    }

    /// Runs `operation` as a task on this executor and blocks the calling thread until it ends. Never call it on
    /// the executor's own thread.
    ///
    /// With a `deadline`, the task is cancelled when it passes, and the call throws ``DeadlinePassed`` unless the
    /// task succeeded all the same. Swift's own timers (`Task.sleep`, and so gRPC's deadlines) wake up on a thread
    /// of the shared pool, which may be busy or held: this deadline is the calling thread's own.
    func run<Result: Sendable>(
        until deadline: ContinuousClock.Instant? = nil, _ operation: @escaping @Sendable () async throws -> Result
    ) throws -> Result {
        let outcome = Outcome<Result>()
        let task = Task(executorPreference: self) {
            do {
                outcome.finish(.success(try await operation()))
            } catch {
                outcome.finish(.failure(error))
            }
        }
        if let deadline, outcome.wait(until: deadline) == nil {
            task.cancel()
            if case .success(let result) = outcome.wait() { return result }
            throw DeadlinePassed()
        }
        return try outcome.wait().get()
    }

    /// A task run with a deadline was cancelled when it passed.
    struct DeadlinePassed: Error {}

    private func runJobs() {
        while true {
            condition.lock()
            while jobs.isEmpty && !stopping { condition.wait() }
            guard let job = jobs.popFirst() else {
                condition.unlock()
                return
            }
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// The result of a task that a thread waits for.
private final class Outcome<Value: Sendable>: @unchecked Sendable {
    private let condition = NSCondition()
    private var result: Swift.Result<Value, any Error>?

    func finish(_ result: Swift.Result<Value, any Error>) {
        condition.lock()
        self.result = result
        condition.signal()
        condition.unlock()
    }

    func wait() -> Swift.Result<Value, any Error> {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let result { return result }
            condition.wait()
        }
    }

    /// The result, or `nil` if there is none by `deadline`.
    func wait(until deadline: ContinuousClock.Instant) -> Swift.Result<Value, any Error>? {
        condition.lock()
        defer { condition.unlock() }
        while result == nil {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { break }
            let seconds = Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18
            _ = condition.wait(until: Date(timeIntervalSinceNow: seconds))
        }
        return result
    }
}

/// Names the calling thread, as `top -H` shows it (at most 15 bytes; Foundation's `Thread.name` does not reach
/// the system on Linux). Elsewhere it does nothing.
func nameThisThread(_ name: String) {
    #if os(Linux)
        try? name.write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
    #endif
}
