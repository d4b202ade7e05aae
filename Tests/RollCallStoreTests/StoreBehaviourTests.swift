import RollCallCore
import RollCallStore
import Testing

/// What every ``PresenceStore`` must do; each test runs against every ``StoreKind``.
@Suite("Store behaviour")
struct StoreBehaviourTests {
    /// A new store loads no records, no groups, no broker time and no skipped rows.
    @Test(arguments: StoreKind.allCases) func newStoreIsEmpty(kind: StoreKind) throws {
        try kind.withStore { store in
            let state = try store.load()
            #expect(state == StoredState())
        }
    }

    /// Records read back equal in every field, `nil` ones included, and sorted by user.
    @Test(arguments: StoreKind.allCases) func recordsRoundTrip(kind: StoreKind) throws {
        try kind.withStore { store in
            let records = [
                fullRecord("carol"), bareRecord("alice"), fullRecord("bob", seq: 1 << 53),
                fullRecord("dave", seq: UInt64(Int64.max)),
                PresenceRecord(
                    user: "eve@example.com".user, status: .online, text: "", since: at(0), lastSeen: at(0),
                    sessions: 1, seq: 0),
            ]
            try store.write(StoreBatch(records: records, brokerTime: at(10)))
            let loaded = try store.load()
            #expect(loaded.records == records.sorted { $0.user < $1.user })
            #expect(loaded.skippedRows == 0)
        }
    }

    /// A later record for a user replaces the stored one, and within one batch the last one wins.
    @Test(arguments: StoreKind.allCases) func upsertReplaces(kind: StoreKind) throws {
        try kind.withStore { store in
            try store.write(StoreBatch(records: [fullRecord("alice"), fullRecord("bob")], brokerTime: at(1)))
            let newer = bareRecord("alice", seq: 9)
            try store.write(StoreBatch(records: [fullRecord("bob", seq: 8), newer], brokerTime: at(2)))
            let last = fullRecord("carol", seq: 12)
            try store.write(StoreBatch(records: [fullRecord("carol", seq: 11), last], brokerTime: at(3)))
            #expect(try store.load().records == [newer, fullRecord("bob", seq: 8), last])
        }
    }

    /// Groups read back with their seq and their members sorted; a member listed twice is stored once.
    @Test(arguments: StoreKind.allCases) func groupsRoundTrip(kind: StoreKind) throws {
        try kind.withStore { store in
            let team = StoredGroup(group: "team".group, members: ["carol".user, "alice".user, "carol".user], seq: 5)
            let empty = StoredGroup(group: "empty".group, members: [], seq: 1 << 53)
            try store.write(StoreBatch(groups: [team, empty], brokerTime: at(1)))
            #expect(
                try store.load().groups == [
                    empty, StoredGroup(group: "team".group, members: ["alice".user, "carol".user], seq: 5),
                ])
        }
    }

    /// Writing a group again replaces its membership and seq, and leaves other groups alone.
    @Test(arguments: StoreKind.allCases) func membershipIsReplaced(kind: StoreKind) throws {
        try kind.withStore { store in
            let ops = StoredGroup(group: "ops".group, members: ["zoe".user], seq: 2)
            try store.write(
                StoreBatch(
                    groups: [StoredGroup(group: "team".group, members: ["a".user, "b".user, "c".user], seq: 1), ops],
                    brokerTime: at(1)))
            let team = StoredGroup(group: "team".group, members: ["c".user, "d".user], seq: 3)
            try store.write(StoreBatch(groups: [team], brokerTime: at(2)))
            #expect(try store.load().groups == [ops, team])
        }
    }

    /// A deleted group is gone with its members; deleting an unknown group is harmless, and a group both written
    /// and deleted in one batch ends up deleted.
    @Test(arguments: StoreKind.allCases) func deletedGroupsAreGone(kind: StoreKind) throws {
        try kind.withStore { store in
            let keep = StoredGroup(group: "keep".group, members: ["a".user], seq: 1)
            try store.write(
                StoreBatch(
                    groups: [keep, StoredGroup(group: "drop".group, members: ["a".user, "b".user], seq: 2)],
                    brokerTime: at(1)))
            try store.write(
                StoreBatch(
                    groups: [StoredGroup(group: "brief".group, members: ["c".user], seq: 4)],
                    deletedGroups: ["drop".group, "never".group, "brief".group], brokerTime: at(2)))
            #expect(try store.load().groups == [keep])
            // Defined again after its deletion, it starts from the new membership only.
            let again = StoredGroup(group: "drop".group, members: ["c".user], seq: 5)
            try store.write(StoreBatch(groups: [again], brokerTime: at(3)))
            #expect(try store.load().groups == [again, keep])
        }
    }

    /// The stored broker time is the greatest any batch carried: a batch with an earlier time leaves it.
    @Test(arguments: StoreKind.allCases) func brokerTimeOnlyGrows(kind: StoreKind) throws {
        try kind.withStore { store in
            let record = bareRecord("alice")
            try store.write(StoreBatch(records: [record], brokerTime: at(1_000)))
            #expect(try store.load().brokerTime == at(1_000))
            try store.write(StoreBatch(records: [record], brokerTime: at(500)))
            #expect(try store.load().brokerTime == at(1_000))
            try store.write(StoreBatch(records: [record], brokerTime: at(2_000)))
            #expect(try store.load().brokerTime == at(2_000))
        }
    }

    /// An empty batch changes nothing, not even the broker time.
    @Test(arguments: StoreKind.allCases) func emptyBatchIsNoOp(kind: StoreKind) throws {
        try kind.withStore { store in
            try store.write(StoreBatch(brokerTime: at(5)))
            #expect(try store.load() == StoredState())
            try store.write(
                StoreBatch(
                    records: [fullRecord("alice")], groups: [StoredGroup(group: "g".group, members: [], seq: 1)],
                    brokerTime: at(10)))
            let before = try store.load()
            try store.write(StoreBatch(brokerTime: at(99)))
            #expect(try store.load() == before)
        }
    }

    /// A batch that fails part-way (a seq SQLite cannot hold, after records and groups that it can) throws a
    /// StoreError naming the user, and stores none of the batch.
    @Test(arguments: StoreKind.allCases) func failedBatchLeavesNothing(kind: StoreKind) throws {
        try kind.withStore { store in
            try store.write(
                StoreBatch(
                    records: [fullRecord("alice")],
                    groups: [StoredGroup(group: "g".group, members: ["a".user], seq: 1)],
                    brokerTime: at(10)))
            let before = try store.load()
            let batch = StoreBatch(
                records: [bareRecord("alice", seq: 20), bareRecord("bob"), bareRecord("carol", seq: UInt64.max)],
                groups: [StoredGroup(group: "g".group, members: ["b".user], seq: 21)], deletedGroups: ["g".group],
                brokerTime: at(20))
            let error = try #require(throws: StoreError.self) { try store.write(batch) }
            #expect(error.operation == .write)
            #expect(error.message.contains("carol"))
            #expect(try store.load() == before)
        }
    }
}
