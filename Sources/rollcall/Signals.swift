import Foundation
import Synchronization
import UnixSignals

/// Set once SIGINT or SIGTERM arrived.
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .relaxed) }
    func set() { flag.store(true, ordering: .relaxed) }
}

/// Runs a blocking loop on its own thread until it returns or SIGINT or SIGTERM asks it to stop; the loop checks
/// the flag between waits of at most a few hundred milliseconds.
func runUntilSignalled(_ body: @escaping @Sendable (StopFlag) throws -> Void) async throws {
    let stop = StopFlag()
    let signals = await UnixSignalsSequence(trapping: .sigint, .sigterm)
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                Thread { continuation.resume(with: Result { try body(stop) }) }.start()
            }
        }
        group.addTask {
            for await _ in signals {
                stop.set()
                return
            }
        }
        try await group.next()
        stop.set()
        group.cancelAll()
        try await group.waitForAll()
    }
}
