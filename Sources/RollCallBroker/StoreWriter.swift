import Foundation
import Logging
import Metrics
import RollCallCore
import RollCallStore
import Synchronization

/// Writes batches to the store on its own thread, so that the event loop never waits for the disk.
///
/// Batches that pile up while a write is under way are merged into the next transaction (a user's latest record
/// wins; a group's latest definition or deletion wins). A failed write is kept and merged into the next attempt,
/// tried again at least once a second. Once a second it also checks that the store still writes where the broker
/// will load from: a database file deleted or replaced under the running broker is reported as critical, made
/// anew, and filled with the whole state, which the writer asks of the loop (``takeSnapshotRequest()``).
final class StoreWriter: Sendable {
    private struct Queue {
        var pending: [StoreBatch] = []
        var finishing = false
        /// Whether the last write, once finishing, stored everything.
        var allWritten = true
    }

    private let initialStore: Mutex<(any PresenceStore)?>
    private let logger: Logger
    private let queue = Mutex(Queue())
    private let snapshotWanted = Atomic<Bool>(false)
    private let wakeLoop: @Sendable () -> Void
    private let writeTimer = Timer(label: "rollcall_store_write_seconds")
    private let work = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    /// How often the writer looks at the store's file and retries a failed write, even with nothing new to write.
    static let checkInterval: DispatchTimeInterval = .seconds(1)

    /// Starts the writer's thread. `wakeLoop` wakes the event loop, from the writer's thread, when it wants the
    /// whole state.
    init(store: any PresenceStore, logger: Logger, wakeLoop: @escaping @Sendable () -> Void) {
        self.initialStore = Mutex(store)
        self.logger = logger
        self.wakeLoop = wakeLoop
        let thread = Thread { [self] in run() }
        thread.name = "rollcall-store"
        thread.start()
    }

    /// Hands a batch to the writer; returns at once.
    func enqueue(_ batch: StoreBatch) {
        guard !batch.isEmpty else { return }
        queue.withLock { $0.pending.append(batch) }
        work.signal()
    }

    /// Whether the writer asked for the whole state since the last call (its file was made anew); the loop then
    /// enqueues everything it holds.
    func takeSnapshotRequest() -> Bool {
        snapshotWanted.exchange(false, ordering: .acquiringAndReleasing)
    }

    /// Writes everything enqueued so far and stops the thread; returns when that is done, with whether all of it
    /// was stored.
    func finish() -> Bool {
        queue.withLock { $0.finishing = true }
        work.signal()
        done.wait()
        return queue.withLock { $0.allWritten }
    }

    private func run() {
        defer { done.signal() }
        guard var store = initialStore.withLock({ $0.take() }) else { return }
        var failed: StoreBatch?
        var failures = 0
        while true {
            _ = work.wait(timeout: .now() + Self.checkInterval)
            let (batches, finishing) = queue.withLock { queue in
                defer { queue.pending = [] }
                return (queue.pending, queue.finishing)
            }
            if !store.isIntact { store = recreate(store) }
            let all = (failed.map { [$0] } ?? []) + batches
            if !all.isEmpty {
                let batch = Self.merge(all)
                do {
                    let started = ContinuousClock.now
                    try store.write(batch)
                    writeTimer.record(duration: ContinuousClock.now - started)
                    if failures > 0 { logger.notice("store writes work again", metadata: ["failed": "\(failures)"]) }
                    failed = nil
                    failures = 0
                } catch {
                    failed = batch
                    failures += 1
                    // The first failure and then one a minute: a full disk must not flood the log.
                    if failures == 1 || failures.isMultiple(of: 60) {
                        logger.error(
                            "store write failed; retrying every second",
                            metadata: [
                                "error": "\(error)", "records": "\(batch.records.count)", "failures": "\(failures)",
                            ])
                    }
                }
            }
            if finishing {
                if failed != nil {
                    logger.critical(
                        "changes could not be written before shutdown",
                        metadata: ["records": "\(failed?.records.count ?? 0)"])
                }
                queue.withLock { $0.allWritten = failed == nil }
                return
            }
        }
    }

    /// A store whose file was deleted or replaced: says so loudly, opens a new one in its place, and asks the loop
    /// for the whole state to fill it. Keeps the old store if a new one cannot be opened (and says why).
    private func recreate(_ store: any PresenceStore) -> any PresenceStore {
        logger.critical(
            "the database file was deleted or replaced under the running broker; making it anew with the whole state",
            metadata: ["store": "\(store.location)"])
        do {
            let fresh = try store.reopened()
            snapshotWanted.store(true, ordering: .releasing)
            wakeLoop()
            return fresh
        } catch {
            logger.critical("the database file cannot be made anew", metadata: ["error": "\(error)"])
            return store
        }
    }

    /// One batch with the effect of `batches` written in order.
    static func merge(_ batches: [StoreBatch]) -> StoreBatch {
        guard batches.count > 1 else { return batches[0] }
        var records: [UserID: PresenceRecord] = [:]
        var groups: [GroupID: StoredGroup?] = [:]  // nil: deleted
        var time = batches[0].brokerTime
        for batch in batches {
            for record in batch.records { records[record.user] = record }
            // Within a batch deletions win, as the store applies them after the upserts.
            for group in batch.groups { groups[group.group] = group }
            for group in batch.deletedGroups { groups[group] = .some(nil) }
            time = max(time, batch.brokerTime)
        }
        return StoreBatch(
            records: records.values.sorted { $0.user < $1.user },
            groups: groups.values.compactMap { $0 }.sorted { $0.group < $1.group },
            deletedGroups: groups.filter { $0.value == nil }.keys.sorted(), brokerTime: time)
    }
}
