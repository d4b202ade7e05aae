import Dispatch
import Foundation
import RollCallCore
import RollCallStore
import RollCallWire
import Synchronization
import Testing

@testable import RollCallBroker

/// The presence log's reads off the loop (docs/history.md, "Reads off the loop"): what the loop takes at the
/// request, what the reader takes from the file, and the reader thread's bounds, without a broker.
@Suite("Log reads: prepared on the loop, read on the reader thread")
struct LogReadTests {
    /// A log in a fresh SQLite file, removed afterwards.
    final class TemporaryLog {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
        let store: SQLiteStore
        let log: PresenceLog
        let epoch: String

        init() throws {
            store = try SQLiteStore(directory: directory)
            let (state, log) = try #require(try store.openLog(keep: true))
            self.log = log
            epoch = state.epoch
        }

        deinit { try? FileManager.default.removeItem(atPath: directory) }

        /// Writes `entries` to the file, as the store's writer would.
        func write(_ entries: [LogEntry]) throws {
            try store.write(StoreBatch(brokerTime: BrokerTime(milliseconds: 1_000), log: entries))
        }
    }

    static func entry(_ offset: UInt64, _ user: String = "alice", _ status: Status = .online, at time: Int64 = 1_000)
        -> LogEntry
    {
        let record = PresenceRecord(
            user: UserID(validating: user)!, status: status, since: BrokerTime(milliseconds: time),
            lastSeen: BrokerTime(milliseconds: time), sessions: status == .offline ? 0 : 1, seq: offset,
            offset: offset)
        return LogEntry(offset: offset, time: BrokerTime(milliseconds: time), record: record)
    }

    static func prepare(
        _ request: Request, _ history: LoopHistory, committed: UInt64, logOffset: UInt64, now: Int64 = 2_000
    ) -> Result<LogRead, PresenceError> {
        LogRead.prepare(
            request, history: history, committed: committed, logOffset: logOffset,
            now: BrokerTime(milliseconds: now), viewer: nil, core: PresenceCore())
    }

    /// A read sees the file up to the offset committed at its request, then what waited for the writer then: a row
    /// the writer commits while the read is under way is not read twice, one published after the request not at
    /// all, and the reply's position is where the log stood at the request.
    @Test func aReadIsTheLogAsAtItsRequest() throws {
        let file = try TemporaryLog()
        try file.write([Self.entry(1), Self.entry(2, "bob")])
        var history = LoopHistory(log: file.log, epoch: file.epoch)
        history.unwritten = [Self.entry(3, "alice", .away), Self.entry(4, "bob", .offline)]
        let read = try Self.prepare(.events(after: 0, logEpoch: nil, limit: 10), history, committed: 2, logOffset: 4)
            .get()
        // Meanwhile the writer commits 3 and the loop publishes 5, which the writer commits too.
        try file.write([Self.entry(3, "alice", .away), Self.entry(5, "alice", .offline)])
        let rows = try read.fetch(from: try file.log.readOnlyConnection())
        guard case .log(let page) = read.reply(rows, core: PresenceCore(), now: BrokerTime(milliseconds: 3_000)) else {
            Issue.record("events did not answer a page")
            return
        }
        #expect(page.entries.map(\.offset) == [1, 2, 3, 4])
        #expect(page.entries.map(\.record.status) == [.online, .online, .away, .offline])
        #expect(page.position == LogPosition(epoch: file.epoch, offset: 4))
        #expect(page.next == nil)
    }

    /// A resume is read as at its request (the file up to what was committed, then what waited for the writer, of
    /// its topics only); what is published while the file is read stays with the loop, though the writer commits
    /// it, and is handed over when the read is back; a resume whose later transitions were dropped (the store could
    /// not write) cannot be made whole.
    @Test func aResumeIsTheLogAtItsRequestThenWhatCameSince() throws {
        let file = try TemporaryLog()
        try file.write([Self.entry(1), Self.entry(2, "bob")])
        var history = LoopHistory(log: file.log, epoch: file.epoch)
        history.unwritten = [Self.entry(3, "alice", .away), Self.entry(4, "bob", .offline)]
        let read = try LogRead.prepareResume(
            of: [.presence("alice".id)], after: 0, logEpoch: file.epoch, history: history, committed: 2, logOffset: 4,
            now: BrokerTime(milliseconds: 2_000)
        ).get()
        history.beginResume(at: read.position.offset)
        // While the file is read: 5 (alice) and 6 (bob) are published, and the writer commits everything.
        history.unwritten.append(contentsOf: [Self.entry(5, "alice", .busy), Self.entry(6, "bob", .online)])
        try file.write([Self.entry(3, "alice", .away), Self.entry(4, "bob", .offline), Self.entry(5, "alice", .busy)])
        history.forget(through: 6)
        #expect(history.unwritten.map(\.offset) == [5, 6], "kept for the resume")
        let rows = try read.fetch(from: try file.log.readOnlyConnection())
        #expect(rows.entries.map(\.offset) == [1, 3])
        let since = history.resumed(after: read.position.offset, through: 6, topics: [.presence("alice".id)])
        #expect(since?.map(\.offset) == [5])
        history.forget(through: 6)
        #expect(history.unwritten.isEmpty, "no resume holds them any more")

        // The store could not write, and the oldest unwritten transitions were dropped past the bound.
        history.beginResume(at: 6)
        history.unwritten = [Self.entry(7), Self.entry(8), Self.entry(9)]
        history.dropUnwritten(past: 2, committed: 6)
        let dropped = history.resumed(after: 6, through: 9, topics: [.allPresence])
        #expect(dropped == nil)
    }

    /// `history` takes only its user's unwritten transitions within its bounds, and pages.
    @Test func historyTakesItsUsersPendingTransitions() throws {
        let file = try TemporaryLog()
        try file.write([Self.entry(1), Self.entry(2, "bob")])
        var history = LoopHistory(log: file.log, epoch: file.epoch)
        history.unwritten = [
            Self.entry(3, "bob", .away), Self.entry(4, "alice", .away), Self.entry(5, "alice", .offline),
        ]
        let read = try Self.prepare(
            .history(HistoryQuery(user: "alice".id, limit: 2)), history, committed: 2, logOffset: 5
        )
        .get()
        #expect(read.pending.map(\.offset) == [4, 5])
        guard case .log(let page) = read.reply(try read.fetch(from: file.log), core: PresenceCore(), now: read.now)
        else {
            Issue.record("history did not answer a page")
            return
        }
        #expect(page.entries.map(\.offset) == [1, 4])
        #expect(page.next == 4)
    }

    /// `query` with `at` reads each user's latest entry at or before `at` from the file only up to the committed
    /// offset: a later row (committed after the request) cannot hide the user's state at the request.
    @Test func queryAtIgnoresRowsCommittedAfterTheRequest() throws {
        let file = try TemporaryLog()
        try file.write([Self.entry(1, "alice", .away, at: 1_000)])
        var history = LoopHistory(log: file.log, epoch: file.epoch)
        history.unwritten = [Self.entry(2, "bob", .online, at: 1_500)]
        let read = try Self.prepare(
            .queryAt(users: ["alice".id, "bob".id, "alice".id, "zoe".id], at: BrokerTime(milliseconds: 2_000)), history,
            committed: 1, logOffset: 2
        ).get()
        try file.write([Self.entry(2, "bob", .online, at: 1_500), Self.entry(3, "alice", .offline, at: 2_000)])
        guard
            case .query(let records, _) = read.reply(
                try read.fetch(from: file.log), core: PresenceCore(), now: read.now)
        else {
            Issue.record("query at did not answer records")
            return
        }
        #expect(records.map(\.user) == ["alice".id, "bob".id, "zoe".id])
        #expect(records.map(\.status) == [.away, .online, .offline])
        #expect(records[2].seq == 0)  // never seen
    }

    /// What the loop alone can refuse is refused at once: another epoch, a cursor ahead of the log, `at` ahead of
    /// the clock; a cursor older than the trimming is the reader's to refuse.
    @Test func refusals() throws {
        let file = try TemporaryLog()
        let history = LoopHistory(log: file.log, epoch: file.epoch)
        let code = { (result: Result<LogRead, PresenceError>) -> ErrorCode? in
            if case .failure(let error) = result { error.code } else { nil }
        }
        #expect(
            code(Self.prepare(.events(after: 0, logEpoch: "other", limit: 5), history, committed: 0, logOffset: 3))
                == .snapshotRequired)
        #expect(
            code(Self.prepare(.events(after: 4, logEpoch: nil, limit: 5), history, committed: 0, logOffset: 3))
                == .snapshotRequired)
        #expect(
            code(Self.prepare(.events(after: 3, logEpoch: file.epoch, limit: 5), history, committed: 0, logOffset: 3))
                == nil)
        #expect(
            code(
                Self.prepare(
                    .queryAt(users: ["alice".id], at: BrokerTime(milliseconds: 2_001)), history, committed: 0,
                    logOffset: 0))
                == .badRequest)
        #expect(code(Self.prepare(.ping, history, committed: 0, logOffset: 0)) == .badRequest)
    }

    /// At most ``LogReadSlots/maxInFlight`` reads in flight; a connection that finds no slot is parked once, and
    /// every parked connection is let back in line when a slot is given back.
    @Test func slotsAreBounded() {
        var slots = LogReadSlots()
        let taken = (0...LogReadSlots.maxInFlight).map { _ in slots.take() }
        #expect(taken == Array(repeating: true, count: LogReadSlots.maxInFlight) + [false])
        let one = FairnessKey.router([1])
        let two = FairnessKey.webSocket(ConnectionID(2))
        slots.park(one)
        slots.park(two)
        slots.park(one)
        let released = slots.give()
        #expect(released == [one, two])
        let again = slots.give()
        #expect(again.isEmpty)
        #expect(slots.inFlight == LogReadSlots.maxInFlight - 2)
        let room = slots.take()
        #expect(room)
    }

    /// The reader runs reads one at a time, in order, off the caller's thread; a stop drops the reads not started
    /// (the third: its answer never comes), lets the one under way (the second) finish, and refuses new ones.
    @Test func readerRunsInOrderAndStops() async throws {
        let file = try TemporaryLog()
        try file.write([Self.entry(1)])
        let gate = DispatchSemaphore(value: 0)
        let entered = Atomic<Int>(0)
        // The stop waits for the read under way as long as the test needs (a loaded machine can take seconds to
        // let it go): what is checked is the order, not the 2 s bound.
        let reader = LogReader(
            log: try file.log.readOnlyConnection(),
            beforeRead: {
                entered.add(1, ordering: .sequentiallyConsistent)
                gate.wait()
            }, stopWait: .seconds(120))
        let answers = Mutex<[String]>([])
        for name in ["first", "second", "third"] {
            #expect(
                reader.submit({ log in try log.events(after: 0, limit: 10).count }) { result in
                    answers.withLock { $0.append("\(name):\((try? result.get()) ?? -1)") }
                })
        }
        try await waitUntil { entered.load(ordering: .sequentiallyConsistent) == 1 }
        #expect(answers.withLock { $0 }.isEmpty)  // held in the hook: nothing answered yet
        gate.signal()
        try await waitUntil { entered.load(ordering: .sequentiallyConsistent) == 2 }
        #expect(answers.withLock { $0 } == ["first:1"])
        let stopped = Atomic<Bool>(false)
        Thread {
            reader.stop()
            stopped.store(true, ordering: .sequentiallyConsistent)
        }.start()
        // Once stopping, the reader takes nothing new; then the read under way is let go and finishes.
        try await waitUntil { !reader.submit({ _ in 0 }) { _ in Issue.record("a read ran after the stop") } }
        gate.signal()
        try await waitUntil { stopped.load(ordering: .sequentiallyConsistent) }
        #expect(answers.withLock { $0 } == ["first:1", "second:1"])
        #expect(entered.load(ordering: .sequentiallyConsistent) == 2)
    }

}
