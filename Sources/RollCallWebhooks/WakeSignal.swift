import Synchronization

/// Wakes one waiting loop early: ``signal()`` from any thread ends the current ``wait(until:)`` at once, or the next
/// one if none is under way, so that a notification between two waits is never lost.
final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var sleeper: Task<Void, Never>?
    }
    private let state = Mutex(State())

    func signal() {
        let sleeper = state.withLock { state -> Task<Void, Never>? in
            state.pending = true
            return state.sleeper
        }
        sleeper?.cancel()
    }

    /// Returns at `deadline`, on a signal (one given since the last wait included), or when the caller is cancelled.
    func wait(until deadline: ContinuousClock.Instant) async {
        let sleeper = Task<Void, Never> { _ = try? await Task.sleep(until: deadline, clock: .continuous) }
        let signalled = state.withLock { state -> Bool in
            state.sleeper = sleeper
            defer { state.pending = false }
            return state.pending
        }
        if signalled { sleeper.cancel() }
        await withTaskCancellationHandler {
            await sleeper.value
        } onCancel: {
            sleeper.cancel()
        }
        // A signal from here on stays pending for the next wait: the caller reads the log after this returns anyway.
        state.withLock { $0.sleeper = nil }
    }
}
