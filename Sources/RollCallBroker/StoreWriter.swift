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
    /// How long the presence log keeps transitions (docs/history.md); `nil` when no log is kept.
    private let logRetention: Int64?
    /// The highest log offset written so far: entries at or below it are in the file.
    private let committed: Atomic<UInt64>
    /// Told the highest offset written, after each write that appended to the log (webhook delivery wakes on it).
    private let logCommitted: @Sendable (UInt64) -> Void
    /// Told the new epoch after the log started over (transitions were dropped while the store could not write).
    private let logRestarted: @Sendable (String) -> Void
    /// Whether the last write failed (the next is retried): publications do not wait for the log meanwhile.
    private let failing = Atomic<Bool>(false)
    /// Whether the loop holds publications for the log, and wants a wake after each commit or failure.
    private let loopWaits = Atomic<Bool>(false)
    /// Whether the loop blocks in ``waitForCommit(through:timeout:)``, and `commitDone` is signalled after each write.
    private let loopBlocks = Atomic<Bool>(false)
    private let commitDone = DispatchSemaphore(value: 0)

    /// The most transitions kept for the log while the store cannot write (about 200 bytes each): past it the oldest
    /// are dropped, and once writes work again the log starts over under a new epoch, so that no reader continues
    /// across the hole (docs/history.md).
    static let defaultMaxUnwrittenLog = 1_000_000
    let maxUnwrittenLog: Int

    /// The least time between two writes' starts (the presence log's commits, docs/history.md): publications wait for
    /// the commit, so this bounds what the log adds to a change's latency under load, against a commit per loop
    /// round's CPU.
    static let writeSpacing: Duration = .milliseconds(1)
    /// The spacing when publications do not wait for the commit (`--publish-before-commit`): fewer commits.
    static let relaxedWriteSpacing: Duration = .milliseconds(5)
    private let writeSpacing: Duration
    /// The least time between two attempts while writes fail: a failing disk is retried once a second, however
    /// often the loop hands over new changes (they wait in memory and go in the next attempt).
    static let retrySpacing: Duration = .seconds(1)

    /// The most log entries one trimming transaction deletes: trimming a busy week never holds the file for long.
    static let trimBatch = 10_000
    /// How often the log is trimmed, in broker milliseconds, while nothing is left over from the last trim.
    static let trimInterval: Int64 = 10_000

    /// How often the writer looks at the store's file and retries a failed write, even with nothing new to write.
    static let checkInterval: DispatchTimeInterval = .seconds(1)

    /// Starts the writer's thread. `wakeLoop` wakes the event loop, from the writer's thread, when it wants the
    /// whole state, and after a commit or a failure while the loop holds publications for the log.
    init(
        store: any PresenceStore, logger: Logger, logRetention: Int64? = nil, committedOffset: UInt64 = 0,
        wakeLoop: @escaping @Sendable () -> Void, logCommitted: @escaping @Sendable (UInt64) -> Void = { _ in },
        logRestarted: @escaping @Sendable (String) -> Void = { _ in },
        maxUnwrittenLog: Int = StoreWriter.defaultMaxUnwrittenLog, writeSpacing: Duration = StoreWriter.writeSpacing
    ) {
        self.maxUnwrittenLog = maxUnwrittenLog
        self.writeSpacing = writeSpacing
        self.logRestarted = logRestarted
        self.initialStore = Mutex(store)
        self.logger = logger
        self.wakeLoop = wakeLoop
        self.logRetention = logRetention
        self.committed = Atomic(committedOffset)
        self.logCommitted = logCommitted
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

    /// The highest log offset in the file: the loop keeps the entries above it to answer reads (docs/history.md).
    var committedOffset: UInt64 { committed.load(ordering: .sequentiallyConsistent) }

    /// Whether the last write failed.
    var isFailing: Bool { failing.load(ordering: .sequentiallyConsistent) }

    /// Whether the writer wakes the loop after each commit or failure. The loop sets it, then reads
    /// ``committedOffset``; the writer stores that, then reads this: one of them sees the other, so no commit goes
    /// unnoticed.
    func wakesLoopAfterCommits(_ wake: Bool) {
        loopWaits.store(wake, ordering: .sequentiallyConsistent)
    }

    /// Blocks until the log holds `offset` or a write failed, at most `timeout` (test mode's `advance` only).
    func waitForCommit(through offset: UInt64, timeout: Duration) {
        let deadline = ContinuousClock.now + timeout
        loopBlocks.store(true, ordering: .sequentiallyConsistent)
        defer { loopBlocks.store(false, ordering: .sequentiallyConsistent) }
        work.signal()
        while committedOffset < offset, !isFailing, ContinuousClock.now < deadline {
            _ = commitDone.wait(timeout: .now() + .milliseconds(10))  // the condition is checked again either way
        }
    }

    /// After a write: the loop, if it waits for one.
    private func tellLoop() {
        if loopWaits.load(ordering: .sequentiallyConsistent) { wakeLoop() }
        if loopBlocks.load(ordering: .sequentiallyConsistent) { commitDone.signal() }
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
        var trim = LogTrimming()
        var droppedLog = 0
        var lastWrite = ContinuousClock.now - writeSpacing
        while true {
            _ = work.wait(timeout: .now() + Self.checkInterval)
            // Transitions come every loop round: one commit per round would cost a write(2) each, on a core the
            // loop needs. What comes within the spacing of the last write goes in the next one.
            if failed == nil {
                let wait = lastWrite + writeSpacing - ContinuousClock.now
                if wait > .zero, !queue.withLock({ $0.finishing }) {
                    let (seconds, attoseconds) = wait.components
                    Thread.sleep(forTimeInterval: Double(seconds) + Double(attoseconds) / 1e18)
                }
            } else {
                // Woken by new changes or by finish(): only the latter cuts the pause short.
                let retry = lastWrite + Self.retrySpacing
                while case let wait = retry - ContinuousClock.now, wait > .zero, !queue.withLock({ $0.finishing }) {
                    let (seconds, attoseconds) = wait.components
                    let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
                    _ = work.wait(timeout: .now() + .nanoseconds(nanoseconds))
                }
            }
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
                    lastWrite = started
                    try store.write(batch)
                    writeTimer.record(duration: ContinuousClock.now - started)
                    failing.store(false, ordering: .sequentiallyConsistent)
                    if let last = batch.log.last?.offset {
                        committed.store(last, ordering: .sequentiallyConsistent)
                        logCommitted(last)
                        tellLoop()
                    }
                    if failures > 0 { logger.notice("store writes work again", metadata: ["failed": "\(failures)"]) }
                    failed = nil
                    failures = 0
                    if droppedLog > 0 { restartLog(store, dropped: &droppedLog) }
                } catch {
                    failed = batch
                    failures += 1
                    if !failing.exchange(true, ordering: .sequentiallyConsistent) { tellLoop() }
                    if batch.log.count > maxUnwrittenLog {
                        let excess = batch.log.count - maxUnwrittenLog
                        failed?.log.removeFirst(excess)
                        if droppedLog == 0 {
                            logger.critical(
                                """
                                the store has not written for long: the oldest transitions are dropped from the \
                                presence log, which starts over under a new epoch once writes work again
                                """)
                        }
                        droppedLog += excess
                    }
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
            if let retention = logRetention, failed == nil { trimLog(store, &trim, retention: retention) }
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

    /// The broker's clock, as the loop last said (``note(time:)``): trimming follows it, test mode's included.
    private let brokerTime = Atomic<Int64>(Int64.min)

    /// Tells the writer the broker's time, for trimming the log; cheap enough for every loop round.
    func note(time: BrokerTime) {
        brokerTime.store(time.milliseconds, ordering: .relaxed)
    }

    /// Starts the log over under a new epoch after transitions were dropped, and tells the loop.
    private func restartLog(_ store: any PresenceStore, dropped: inout Int) {
        do {
            let epoch = try store.restartLog()
            logger.critical(
                "the presence log started over: transitions were dropped while the store could not write",
                metadata: ["dropped": "\(dropped)", "log_epoch": "\(epoch)"])
            dropped = 0
            logRestarted(epoch)
        } catch {
            logger.error("starting the presence log over failed; trying again", metadata: ["error": "\(error)"])
        }
    }

    /// When the log was last trimmed.
    private struct LogTrimming {
        var last: BrokerTime?
        var unfinished = false
    }

    /// Deletes log entries older than the retention, at most ``trimBatch`` per round, once per ``trimInterval`` of
    /// broker time (every round while a trim is unfinished). Off the loop; a failure is logged and tried again.
    private func trimLog(_ store: any PresenceStore, _ trim: inout LogTrimming, retention: Int64) {
        let now = brokerTime.load(ordering: .relaxed)
        guard now != Int64.min else { return }
        let time = BrokerTime(milliseconds: now)
        guard trim.unfinished || trim.last.map({ time - $0 >= Self.trimInterval }) ?? true else { return }
        do {
            let deleted = try store.trimLog(
                before: BrokerTime(milliseconds: time.milliseconds - retention), maxRows: Self.trimBatch)
            trim.unfinished = deleted == Self.trimBatch
            trim.last = time
            if deleted > 0 { logger.debug("presence log trimmed", metadata: ["entries": "\(deleted)"]) }
            if trim.unfinished { work.signal() }  // the rest at once, one transaction at a time
        } catch {
            trim.last = time
            logger.error("trimming the presence log failed", metadata: ["error": "\(error)"])
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
        var log: [LogEntry] = []
        var privacy: [UserID: PrivacySettings] = [:]
        var logStart: LogStart?
        var logFloor: LogFloor?
        for batch in batches {
            // A cluster's epoch comes before any entry of it, and never changes within a run: the last one holds.
            logStart = batch.logStart ?? logStart
            logFloor = batch.logFloor?.raised(to: logFloor) ?? logFloor
            for settings in batch.privacy { privacy[settings.user] = settings }
            log += batch.log  // transitions are kept, all of them, in order
            for record in batch.records { records[record.user] = record }
            // Within a batch deletions win, as the store applies them after the upserts.
            for group in batch.groups { groups[group.group] = group }
            for group in batch.deletedGroups { groups[group] = .some(nil) }
            time = max(time, batch.brokerTime)
        }
        var merged = StoreBatch(
            records: records.values.sorted { $0.user < $1.user },
            groups: groups.values.compactMap { $0 }.sorted { $0.group < $1.group },
            deletedGroups: groups.filter { $0.value == nil }.keys.sorted(), brokerTime: time, log: log,
            privacy: privacy.values.sorted { $0.user < $1.user })
        merged.logStart = logStart
        merged.logFloor = logFloor
        return merged
    }
}
