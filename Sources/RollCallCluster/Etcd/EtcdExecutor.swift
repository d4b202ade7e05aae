import DequeModule
import Foundation

/// A `TaskExecutor` on one thread of its own: the etcd client runs its gRPC tasks on it, and its blocking calls
/// wait for them with ``run(_:)``.
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

    init(name: String) {
        let thread = Thread { [self] in runJobs() }
        thread.name = name
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
    func run<Result: Sendable>(_ operation: @escaping @Sendable () async throws -> Result) throws -> Result {
        let outcome = Outcome<Result>()
        Task(executorPreference: self) {
            do {
                outcome.finish(.success(try await operation()))
            } catch {
                outcome.finish(.failure(error))
            }
        }
        return try outcome.wait().get()
    }

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
}
