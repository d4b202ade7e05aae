import Foundation
import Testing

@testable import RollCallCluster

@Suite struct EtcdExecutorTests {
    /// A call run with a deadline ends at the deadline, on the calling thread's own clock (Swift's timers wake up on
    /// the shared pool, which a blocked caller may hold): a task that would never end is cancelled and the call
    /// throws `DeadlinePassed` long before; a task done in time gives its result.
    @Test func aDeadlineEndsTheTaskItRuns() throws {
        let executor = EtcdExecutor(name: "etcd-test")
        defer { executor.stop() }
        let start = ContinuousClock.now
        #expect(throws: EtcdExecutor.DeadlinePassed.self) {
            try executor.run(until: .now + .milliseconds(100)) {
                // A stream that nothing feeds or finishes: only the cancellation ends the wait for it.
                let (stream, continuation) = AsyncStream<Int>.makeStream()
                for await _ in stream {}
                withExtendedLifetime(continuation) {}
                try Task.checkCancellation()
            }
        }
        let elapsed = ContinuousClock.now - start
        print("a call with a deadline of 100 ms over a task that never ends ended after \(elapsed)")
        #expect(elapsed < .seconds(10))
        #expect(try executor.run(until: .now + .seconds(10)) { 42 } == 42)
    }
}
