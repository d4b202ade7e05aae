import Foundation
import RollCallCore
import Testing

@testable import RollCallStore

/// The presence log in SQLite (docs/history.md): appends, reads, trimming and epochs, without a broker.
@Suite("Presence log store")
struct PresenceLogTests {
    private func entry(_ offset: UInt64, _ user: String, _ status: Status, at time: Int64) -> LogEntry {
        let record = PresenceRecord(
            user: user.user, status: status, since: at(time), lastSeen: at(time), sessions: status == .offline ? 0 : 1,
            seq: offset, offset: offset)
        return LogEntry(offset: offset, time: at(time), record: record)
    }

    /// Entries come back as written, by offset, by user and time, and as each user's latest at a time; a record's
    /// offset is kept with the user's row.
    @Test func readsWhatWasAppended() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let (state, log) = try #require(try store.openLog(keep: true))
            #expect(state.epoch.count == 16)
            let entries = [
                entry(10, "alice", .online, at: 1_000), entry(11, "bob", .online, at: 1_100),
                entry(12, "alice", .away, at: 2_000), entry(13, "alice", .offline, at: 3_000),
            ]
            try store.write(StoreBatch(records: [entries[3].record], brokerTime: at(3_000), log: entries))
            #expect(try log.events(after: 0, limit: 10) == entries)
            #expect(try log.events(after: 11, limit: 1) == [entries[2]])
            #expect(
                try log.history(of: "alice".user, from: at(1_500), to: nil, after: nil, limit: 10).map(\.offset)
                    == [12, 13])
            #expect(
                try log.history(of: "alice".user, from: nil, to: at(2_000), after: 10, limit: 10).map(\.offset)
                    == [12])
            let latest = try log.latest(of: ["alice".user, "bob".user, "carol".user], at: at(2_500))
            #expect(latest["alice".user]?.offset == 12)
            #expect(latest["bob".user]?.offset == 11)
            #expect(latest["carol".user] == nil)
            #expect(try store.load().records.first?.offset == 13)
            #expect(try log.state().lastOffset == 13)
            // Written twice (a retried batch): the first stays, nothing fails.
            try store.write(StoreBatch(brokerTime: at(3_000), log: [entries[0]]))
            #expect(try log.events(after: 0, limit: 10).count == 4)
        }
    }

    /// Trimming deletes entries older than the cut-off but each user's latest before it, in bounded transactions,
    /// and moves the log's horizon and trimmed offset only as far as it got.
    @Test func trimmingKeepsEachUsersLatest() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let (_, log) = try #require(try store.openLog(keep: true))
            let entries = [
                entry(1, "alice", .online, at: 1_000), entry(2, "alice", .away, at: 2_000),
                entry(3, "bob", .online, at: 2_500), entry(4, "alice", .busy, at: 3_000),
                entry(5, "alice", .offline, at: 9_000),
            ]
            try store.write(StoreBatch(brokerTime: at(9_000), log: entries))
            #expect(try store.trimLog(before: at(5_000), maxRows: 1) == 1)
            #expect(try log.state().trimmedThrough == 1)
            #expect(try log.state().horizon < at(5_000))
            #expect(try store.trimLog(before: at(5_000), maxRows: 10) == 1)
            #expect(try store.trimLog(before: at(5_000), maxRows: 10) == 0)
            #expect(try log.events(after: 0, limit: 10).map(\.offset) == [3, 4, 5])
            #expect(try log.state().trimmedThrough == 2)
            #expect(try log.state().horizon == at(5_000))
        }
    }

    /// A store run without a log empties it and marks it not kept; keeping it again starts a new epoch, seeded with
    /// every user's record, so that no one continues across the hole.
    @Test func epochsChangeWhenTheLogWasNotKept() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let first = try #require(try store.openLog(keep: true)).state.epoch
            #expect(try #require(try store.openLog(keep: true)).state.epoch == first)
            try store.write(
                StoreBatch(
                    records: [fullRecord("alice")], brokerTime: at(5_000), log: [entry(7, "alice", .online, at: 4_000)])
            )
            let (off, log) = try #require(try store.openLog(keep: false))
            #expect(off.epoch.isEmpty)
            #expect(try log.events(after: 0, limit: 10).isEmpty)
            let (again, _) = try #require(try store.openLog(keep: true))
            #expect(!again.epoch.isEmpty && again.epoch != first)
            let seeded = try log.events(after: 0, limit: 10)
            #expect(seeded.map(\.record.user) == ["alice".user])
            #expect(seeded.first?.time == at(5_000))
            #expect(again.horizon == at(5_000))
        }
    }

    /// A node of a cluster keeps its log under the cluster's epoch: a log under another one is emptied and refuses
    /// cursors through the floor; under the same epoch nothing changes. A floor (a snapshot in place of etcd's
    /// history) deletes the entries below it, keeps those from `keepFrom` on, written in the same batch, and refuses
    /// earlier cursors and times.
    @Test func aClustersEpochAndFloorsHoldInTheFile() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let (own, log) = try #require(try store.openLog(keep: true))
            try store.write(StoreBatch(brokerTime: at(1_000), log: [entry(7, "alice", .online, at: 1_000)]))
            let start = LogStart(epoch: "0000000000001234", floor: 9)
            #expect(own.epoch != start.epoch)
            var batch = StoreBatch(brokerTime: at(2_000), log: [entry(10, "bob", .online, at: 2_000)])
            batch.logStart = start
            try store.write(batch)
            var state = try log.state()
            #expect(state.epoch == start.epoch)
            #expect(state.trimmedThrough == 9)
            #expect(try log.events(after: 0, limit: 10).map(\.offset) == [10])
            try store.write(batch)  // the same epoch again: kept as it is
            #expect(try log.events(after: 0, limit: 10).map(\.offset) == [10])

            try store.write(StoreBatch(brokerTime: at(2_500), log: [entry(20, "bob", .away, at: 2_500)]))
            var snapshot = StoreBatch(brokerTime: at(3_000), log: [entry(40, "carol", .online, at: 3_000)])
            snapshot.logFloor = LogFloor(through: 49, keepFrom: 40)
            try store.write(snapshot)
            state = try log.state()
            #expect(state.trimmedThrough == 49)
            #expect(state.horizon == at(3_000))
            // Bob's latest entry before the floor still tells his state at it; his earlier one went.
            #expect(try log.events(after: 0, limit: 10).map(\.offset) == [20, 40])
        }
    }

    /// Webhook cursors are kept per URL and never move back.
    @Test func webhookCursorsOnlyMoveForward() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let (_, log) = try #require(try store.openLog(keep: true))
            #expect(try log.webhookCursor(for: "http://a") == nil)
            try log.saveWebhookCursor(20, for: "http://a")
            try log.saveWebhookCursor(10, for: "http://a")
            #expect(try log.webhookCursor(for: "http://a") == 20)
            #expect(try log.webhookCursor(for: "http://b") == nil)
        }
    }
}
