import Foundation
import Logging
import RollCallCore
import RollCallStore
import Synchronization

/// Writes batches to the store on its own thread, so that the event loop never waits for the disk.
///
/// Batches that pile up while a write is under way are merged into the next transaction (a user's latest record
/// wins; a group's latest definition or deletion wins). A failed write is kept and merged into the next attempt.
final class StoreWriter: Sendable {
    private struct Queue {
        var pending: [StoreBatch] = []
        var finishing = false
    }

    private let store: any PresenceStore
    private let logger: Logger
    private let queue = Mutex(Queue())
    private let work = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    init(store: any PresenceStore, logger: Logger) {
        self.store = store
        self.logger = logger
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

    /// Writes everything enqueued so far and stops the thread; returns when that is done.
    func finish() {
        queue.withLock { $0.finishing = true }
        work.signal()
        done.wait()
    }

    private func run() {
        defer { done.signal() }
        var failed: StoreBatch?
        while true {
            // A failed batch is tried again after a second even if nothing new arrives.
            if failed == nil { work.wait() } else { _ = work.wait(timeout: .now() + 1) }
            let (batches, finishing) = queue.withLock { queue in
                defer { queue.pending = [] }
                return (queue.pending, queue.finishing)
            }
            let all = (failed.map { [$0] } ?? []) + batches
            if !all.isEmpty {
                let batch = Self.merge(all)
                do {
                    try store.write(batch)
                    failed = nil
                } catch {
                    failed = batch
                    logger.error(
                        "store write failed; retrying with the next batch",
                        metadata: ["error": "\(error)", "records": "\(batch.records.count)"])
                }
            }
            if finishing {
                if failed != nil { logger.critical("changes could not be written before shutdown") }
                return
            }
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
