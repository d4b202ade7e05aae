import DequeModule
import Foundation
import Logging
import RollCallStore
import Synchronization

/// Reads the presence log on a thread of its own, on a read-only connection of its own, so that a slow disk or a
/// large page never holds up the event loop (docs/history.md, "Reads off the loop"). The loop hands it prepared
/// reads (LogRead.swift); each read's result goes back to the loop through its mailbox. Reads run one at a time, in
/// the order they came; the loop bounds how many wait (``LogReadSlots``).
final class LogReader: Sendable {
    private struct State {
        var jobs = Deque<@Sendable (PresenceLog) -> Void>()
        var stopping = false
    }

    private let log: PresenceLog
    private let state = Mutex(State())
    private let work = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    /// Tests only: runs on the reader thread before each read (a test holds the reader with it).
    private let beforeRead: (@Sendable () -> Void)?

    /// How long ``stop()`` waits for a read under way before it leaves the thread to finish on its own.
    private let stopWait: DispatchTimeInterval

    /// Starts the thread, reading `log` (a connection no other thread uses).
    init(log: PresenceLog, beforeRead: (@Sendable () -> Void)? = nil, stopWait: DispatchTimeInterval = .seconds(2)) {
        self.log = log
        self.beforeRead = beforeRead
        self.stopWait = stopWait
        let thread = Thread { [self] in run() }
        thread.name = "rollcall-log-reader"
        thread.start()
    }

    /// Runs `read` on the reader thread, then `answer` with its outcome (on the reader thread: it should post to
    /// the loop). Returns at once; `false`, and nothing runs, once the reader has stopped.
    @discardableResult
    func submit<Rows: Sendable>(
        _ read: @escaping @Sendable (PresenceLog) throws -> Rows,
        answer: @escaping @Sendable (Result<Rows, any Error>) -> Void
    ) -> Bool {
        let accepted = state.withLock { state in
            guard !state.stopping else { return false }
            state.jobs.append { log in answer(Result { try read(log) }) }
            return true
        }
        if accepted { work.signal() }
        return accepted
    }

    /// Ends the thread: reads not started are dropped (their answers never come); one under way finishes, and is
    /// waited for at most `stopWait` (2 s by default). Called once, by the loop as it stops.
    func stop() {
        state.withLock { state in
            state.stopping = true
            state.jobs.removeAll()
        }
        work.signal()
        _ = done.wait(timeout: .now() + stopWait)
    }

    private func run() {
        defer { done.signal() }
        while true {
            work.wait()
            while let job = state.withLock({ $0.stopping ? nil : $0.jobs.popFirst() }) {
                beforeRead?()
                job(log)
            }
            if state.withLock({ $0.stopping }) { return }
        }
    }
}

/// How many log reads may be in flight (pure; the loop's, Shell/StoreSide.swift). One per connection: a
/// connection with a read in flight is held in the fair queue, its later requests behind the read, so that its
/// replies keep their order. And at most ``maxInFlight`` in all: past it, a connection whose turn brings a read is
/// parked, its read back at the head of its queue, until a read finishes; then every parked connection goes back in
/// line, and those that find no slot again are parked again (a closed one simply never comes back).
struct LogReadSlots {
    /// The most reads in flight in all: what waits on the reader thread is at most this many prepared reads (each
    /// at most a page of unwritten transitions), and a read waits behind at most this many others.
    static let maxInFlight = 16

    private(set) var inFlight = 0
    /// The connections waiting for room, first come first served.
    private(set) var parked = Deque<FairnessKey>()

    /// Whether a slot is free.
    var hasRoom: Bool { inFlight < Self.maxInFlight }

    /// Takes a slot for a read, if one is free.
    mutating func take() -> Bool {
        guard inFlight < Self.maxInFlight else { return false }
        inFlight += 1
        return true
    }

    /// Parks `key` until a slot is free.
    mutating func park(_ key: FairnessKey) {
        if !parked.contains(key) { parked.append(key) }
    }

    /// Gives a finished read's slot back; the connections parked, to be let back in line in the order they came.
    mutating func give() -> [FairnessKey] {
        inFlight = max(0, inFlight - 1)
        defer { parked.removeAll() }
        return Array(parked)
    }
}
