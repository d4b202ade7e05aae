import Foundation
import Logging
import RollCallCore
import RollCallStore
import Synchronization
import Testing

@testable import RollCallBroker

/// The store writer's handling of the presence log when its disk fails, on a real SQLite file whose writes are made
/// to fail for a while (FailingStore).
@Suite("Store writer: the presence log through a failing disk")
struct StoreWriterLogTests {
    /// A real SQLite store whose writes throw while `failing` is set: a disk that is full for a while.
    final class FailingStore: PresenceStore {
        let inner: SQLiteStore
        let failing = Atomic<Bool>(true)
        /// The log offsets of the last failed attempt.
        let lastFailed = Mutex<[UInt64]>([])
        /// When each failed attempt was made.
        let failedAt = Mutex<[ContinuousClock.Instant]>([])
        struct DiskFull: Error {}
        init(_ inner: SQLiteStore) { self.inner = inner }
        func load() throws -> StoredState { try inner.load() }
        func write(_ batch: StoreBatch) throws {
            if failing.load(ordering: .acquiring) {
                lastFailed.withLock { $0 = batch.log.map(\.offset) }
                failedAt.withLock { $0.append(.now) }
                throw DiskFull()
            }
            try inner.write(batch)
        }
        func openLog(keep: Bool) throws -> (state: LogState, log: PresenceLog)? { try inner.openLog(keep: keep) }
        func trimLog(before cutoff: BrokerTime, maxRows: Int) throws -> Int {
            try inner.trimLog(before: cutoff, maxRows: maxRows)
        }
        func restartLog() throws -> String { try inner.restartLog() }
    }

    private func entry(_ offset: UInt64) -> LogEntry { Self.entry(offset) }

    private static func entry(_ offset: UInt64) -> LogEntry {
        let record = PresenceRecord(
            user: UserID(validating: "u\(offset)")!, status: .online, since: BrokerTime(milliseconds: 1),
            lastSeen: BrokerTime(milliseconds: 1), sessions: 1, seq: offset, offset: offset)
        return LogEntry(offset: offset, time: BrokerTime(milliseconds: 1), record: record)
    }

    /// Batches merged into one write keep a cluster's epoch and the highest floor, whichever batch carried them:
    /// the store applies the epoch before the merged entries and the floor after them.
    @Test func mergedBatchesKeepTheEpochAndTheHighestFloor() {
        var first = StoreBatch(brokerTime: BrokerTime(milliseconds: 1))
        first.logStart = LogStart(epoch: "0000000000001234", floor: 0)
        first.logFloor = LogFloor(through: 50, keepFrom: 40)
        var second = StoreBatch(brokerTime: BrokerTime(milliseconds: 2))
        second.logFloor = LogFloor(through: 30, keepFrom: 20)
        let merged = StoreWriter.merge([first, second, StoreBatch(brokerTime: BrokerTime(milliseconds: 3))])
        #expect(merged.logStart == first.logStart)
        #expect(merged.logFloor == first.logFloor)
        #expect(!merged.isEmpty)
    }

    /// While the disk fails the writer keeps at most its bound of transitions, dropping the oldest; once writes work
    /// again the log starts over under a new epoch, which the loop is told, so that no reader continues across the
    /// hole. Nothing was lost without the epoch changing.
    @Test func aLongFailureStartsTheLogOver() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let sqlite = try SQLiteStore(directory: directory)
        let (first, log) = try #require(try sqlite.openLog(keep: true))
        let store = FailingStore(sqlite)
        let restarted = Mutex<String?>(nil)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let writer = StoreWriter(
            store: store, logger: logger, logRetention: 86_400_000, wakeLoop: {},
            logRestarted: { epoch in restarted.withLock { $0 = epoch } }, maxUnwrittenLog: 10)
        for offset in 1...30 {
            writer.enqueue(StoreBatch(brokerTime: BrokerTime(milliseconds: 1), log: [entry(UInt64(offset))]))
        }
        // An attempt with everything enqueued has failed; the writer keeps the newest 10 for the next ones.
        try await waitUntil { store.lastFailed.withLock { $0.last } == 30 }
        try await waitUntil(seconds: 3) { store.lastFailed.withLock { $0 } == Array(21...30) }
        #expect(writer.committedOffset == 0)
        store.failing.store(false, ordering: .releasing)
        writer.enqueue(StoreBatch(brokerTime: BrokerTime(milliseconds: 2), log: [entry(31)]))
        try await waitUntil { restarted.withLock { $0 } != nil }
        let epoch = try #require(restarted.withLock { $0 })
        #expect(epoch != first.epoch)
        #expect(try log.state().epoch == epoch)
        #expect(writer.committedOffset == 31)
        #expect(writer.finish())
    }

    /// While the disk fails, the writer tries again once a second however often changes come (here every
    /// millisecond): a full disk costs no CPU and no flood of log lines. What came meanwhile goes in the next attempt.
    /// Stopping does not wait for the pause to end.
    @Test func aFailingDiskIsRetriedOnceASecond() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = FailingStore(try SQLiteStore(directory: directory))
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let writer = StoreWriter(store: store, logger: logger, wakeLoop: {})
        // The changes come from a thread of their own, as from the loop: a task sleeping a millisecond at a time
        // can wait seconds for a turn of Swift Concurrency's two threads while the rest of the suite runs.
        let enqueued = Atomic<UInt64>(0)
        let stop = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        Thread {
            while !stop.load(ordering: .acquiring) {
                let offset = enqueued.add(1, ordering: .acquiringAndReleasing).newValue
                writer.enqueue(StoreBatch(brokerTime: BrokerTime(milliseconds: 1), log: [Self.entry(offset)]))
                Thread.sleep(forTimeInterval: 0.001)
            }
            done.signal()
        }.start()
        try await waitUntil(seconds: 10) { store.failedAt.withLock { $0.count } >= 3 }
        stop.store(true, ordering: .releasing)
        done.wait()
        let attempts = store.failedAt.withLock { $0 }
        for (earlier, later) in zip(attempts, attempts.dropFirst()) {
            #expect(later - earlier >= .milliseconds(990))
        }
        // The last attempt carried everything enqueued before it, the first change included; and far more changes
        // came than attempts were made (two seconds of a change a millisecond).
        #expect(store.lastFailed.withLock { $0.first } == 1)
        #expect(enqueued.load(ordering: .acquiring) > 100)
        #expect(!writer.finish())
    }

    /// Without a failure nothing starts over: every transition is written, in order, under the first epoch.
    @Test func noFailureKeepsTheEpoch() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let sqlite = try SQLiteStore(directory: directory)
        let (first, log) = try #require(try sqlite.openLog(keep: true))
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let writer = StoreWriter(store: sqlite, logger: logger, wakeLoop: {}, maxUnwrittenLog: 10)
        for offset in 1...30 {
            writer.enqueue(StoreBatch(brokerTime: BrokerTime(milliseconds: 1), log: [entry(UInt64(offset))]))
        }
        #expect(writer.finish())
        #expect(try log.events(after: 0, limit: 100).map(\.offset) == Array(1...30))
        #expect(try log.state().epoch == first.epoch)
    }
}
