import RollCallCluster
import Testing

/// The in-memory copy of the cluster's keys: key changes in, cluster changes out, no etcd.
@Suite struct ClusterReplicaTests {
    let keys = ClusterKeys()
    let a = ClusterKeys.Incarnation(node: "a", lease: 0x10)
    let b = ClusterKeys.Incarnation(node: "b", lease: 0x20)

    func put(_ entry: ClusterKeys.Entry, _ value: String, at revision: Int64) -> EtcdEvent {
        EtcdEvent(kind: .put, kv: EtcdKeyValue(key: keys.key(entry), value: value, modRevision: revision))
    }

    func delete(_ entry: ClusterKeys.Entry, at revision: Int64) -> EtcdEvent {
        EtcdEvent(kind: .delete, kv: EtcdKeyValue(key: keys.key(entry), value: "", modRevision: revision))
    }

    /// Keys round-trip through the layout, and keys outside it are not taken for anything.
    @Test func keyLayout() {
        let session = ClusterKeys.SessionKey(incarnation: a, id: "42")
        #expect(keys.key(.session(session)) == "/rollcall/v1/sessions/a/10/42")
        #expect(keys.key(.cluster) == "/rollcall/v1/cluster")
        #expect(keys.key(.lost(a)) == "/rollcall/v1/lost/a/10")
        for entry: ClusterKeys.Entry in [
            .node(a), .session(session), .user("ann"), .group("team"), .cluster, .lost(a),
            .privacy(ClusterKeys.PrivacyKey(user: "ann", field: .contacts)),
        ] {
            #expect(keys.entry(keys.key(entry)) == entry)
        }
        let negative = ClusterKeys.Incarnation(node: "n-1.x", lease: -5)
        #expect(keys.entry(keys.key(.node(negative))) == .node(negative))
        for stray in [
            "/rollcall/v2/users/ann", "/rollcall/v1/nodes/a", "/rollcall/v1/nodes/a/zz",
            "/rollcall/v1/sessions/a/10", "/rollcall/v1/users/", "/rollcall/v1/nodes/a b/10", "/other",
            "/rollcall/v1/privacy/ann", "/rollcall/v1/privacy/ann/x", "/rollcall/v1/privacy//policy",
        ] {
            #expect(keys.entry(stray) == nil, "\(stray)")
        }
    }

    /// A lost incarnation's stamp comes out as a change when it is written and when it goes (its writer's lease
    /// ended), from the watch and from a snapshot alike.
    @Test func lossStampsAreChanges() {
        var replica = ClusterReplica()
        #expect(
            replica.apply([put(.lost(a), "{\"at\":5}", at: 9)]) == [.lossStamped(a, value: "{\"at\":5}", revision: 9)])
        #expect(replica.losses == [a: "{\"at\":5}"])
        #expect(replica.apply([delete(.lost(a), at: 10)]) == [.lossStampDeleted(a, revision: 10)])
        #expect(replica.losses.isEmpty)
        let snapshot = [EtcdKeyValue(key: keys.key(.lost(b)), value: "{\"at\":6}", modRevision: 11)]
        #expect(replica.load(snapshot: snapshot, revision: 12) == [.lossStamped(b, value: "{\"at\":6}", revision: 12)])
        #expect(replica.load(snapshot: [], revision: 13) == [.lossStampDeleted(b, revision: 13)])
    }

    /// A user's privacy choices come out as changes when written and when deleted, from the watch and from a
    /// snapshot alike (a snapshot tells only what differs from the copy).
    @Test func privacyChoicesAreChanges() {
        let annPolicy = ClusterKeys.PrivacyKey(user: "ann", field: .policy)
        let bobContacts = ClusterKeys.PrivacyKey(user: "bob", field: .contacts)
        let bobBlocks = ClusterKeys.PrivacyKey(user: "bob", field: .blocks)
        var replica = ClusterReplica()
        #expect(
            replica.apply([put(.privacy(annPolicy), "p1", at: 7)]) == [.privacyPut(annPolicy, value: "p1", revision: 7)]
        )
        #expect(replica.privacy == [annPolicy: "p1"])
        #expect(replica.apply([delete(.privacy(annPolicy), at: 8)]) == [.privacyDeleted(annPolicy, revision: 8)])
        #expect(replica.apply([delete(.privacy(annPolicy), at: 9)]).isEmpty)
        _ = replica.apply([put(.privacy(bobContacts), "c1", at: 10), put(.privacy(bobBlocks), "b1", at: 10)])
        let snapshot = [
            EtcdKeyValue(key: keys.key(.privacy(bobContacts)), value: "c2"),
            EtcdKeyValue(key: keys.key(.privacy(annPolicy)), value: "p2"),
        ]
        #expect(
            replica.load(snapshot: snapshot, revision: 20) == [
                .privacyPut(annPolicy, value: "p2", revision: 20), .privacyPut(bobContacts, value: "c2", revision: 20),
                .privacyDeleted(bobBlocks, revision: 20),
            ])
    }

    /// Sessions deleted in the same revision as their incarnation's key were lost with their node; a session its
    /// node deleted itself just ended.
    @Test func sessionsOfALostNodeEndAsNodeLost() {
        var replica = ClusterReplica()
        let s1 = ClusterKeys.SessionKey(incarnation: a, id: "1")
        let s2 = ClusterKeys.SessionKey(incarnation: a, id: "2")
        let s3 = ClusterKeys.SessionKey(incarnation: b, id: "3")
        _ = replica.apply([
            put(.node(a), "{}", at: 2), put(.node(b), "{}", at: 3), put(.session(s1), "ann", at: 4),
            put(.session(s2), "bob", at: 5), put(.session(s3), "cat", at: 6),
        ])
        #expect(replica.sessions.count == 3)
        // Node b deletes its own session (a bye, with the user's record in the same transaction).
        #expect(
            replica.apply([delete(.session(s3), at: 7), put(.user("cat"), "offline", at: 7)]) == [
                .sessionEnded(s3, .ended, revision: 7), .userPut("cat", value: "offline", revision: 7),
            ])
        // Node a's lease expires: etcd deletes its keys in one revision, in any order.
        #expect(
            replica.apply([delete(.session(s1), at: 8), delete(.node(a), at: 8), delete(.session(s2), at: 8)]) == [
                .sessionEnded(s1, .nodeLost, revision: 8), .sessionEnded(s2, .nodeLost, revision: 8),
                .incarnationEnded(a, revision: 8),
            ])
        #expect(replica.incarnations.keys.map { $0 } == [b])
        #expect(replica.sessions.isEmpty)
        #expect(replica.revision == 8)
    }

    /// Events of a revision already applied (covered by a snapshot) change nothing.
    @Test func oldRevisionsAreIgnored() {
        var replica = ClusterReplica()
        _ = replica.load(
            snapshot: [EtcdKeyValue(key: keys.key(.user("ann")), value: "v2", modRevision: 9)], revision: 10)
        #expect(replica.apply([put(.user("ann"), "v1", at: 9)]).isEmpty)
        #expect(replica.users["ann"] == "v2")
        #expect(replica.apply([put(.user("ann"), "v3", at: 11)]) == [.userPut("ann", value: "v3", revision: 11)])
    }

    /// A snapshot replacing a stale copy yields exactly the differences: sessions that ended (lost with their node,
    /// or ended by it) before new and changed ones, as watching nodes saw them, incarnations that ended last.
    @Test func snapshotAfterAGap() {
        var replica = ClusterReplica()
        let s1 = ClusterKeys.SessionKey(incarnation: a, id: "1")
        let s2 = ClusterKeys.SessionKey(incarnation: b, id: "2")
        let s3 = ClusterKeys.SessionKey(incarnation: b, id: "3")
        _ = replica.apply([
            put(.node(a), "{}", at: 2), put(.node(b), "{}", at: 2), put(.session(s1), "ann", at: 3),
            put(.session(s2), "bob", at: 3), put(.group("g"), "[ann]", at: 3), put(.user("zed"), "z", at: 3),
        ])
        let snapshot = [
            EtcdKeyValue(key: keys.key(.node(b)), value: "{}"),
            EtcdKeyValue(key: keys.key(.session(s3)), value: "cat"),
            EtcdKeyValue(key: keys.key(.group("g")), value: "[ann,bob]"),
            EtcdKeyValue(key: keys.key(.user("ann")), value: "offline"),
        ]
        #expect(
            replica.load(snapshot: snapshot, revision: 50) == [
                .sessionEnded(s1, .nodeLost, revision: 50), .sessionEnded(s2, .ended, revision: 50),
                .sessionPut(s3, value: "cat", revision: 50),
                .userPut("ann", value: "offline", revision: 50), .userDeleted("zed", revision: 50),
                .groupPut("g", value: "[ann,bob]", revision: 50), .incarnationEnded(a, revision: 50),
            ])
        #expect(replica.revision == 50)
        // Loading the same snapshot again changes nothing.
        #expect(replica.load(snapshot: snapshot, revision: 50).isEmpty)
    }

    /// Two copies fed the same history in different batches (each of whole revisions, as etcd's watch sends them)
    /// compute the same changes and the same state.
    @Test func sameHistorySameChanges() {
        let s1 = ClusterKeys.SessionKey(incarnation: a, id: "1")
        let history = [
            put(.node(a), "{}", at: 2), put(.session(s1), "ann", at: 3), put(.user("ann"), "online", at: 3),
            put(.group("g"), "[ann]", at: 4), delete(.session(s1), at: 5), delete(.node(a), at: 5),
        ]
        var whole = ClusterReplica()
        var pieces = ClusterReplica()
        let all = whole.apply(history)
        let split =
            pieces.apply(Array(history[0..<1])) + pieces.apply(Array(history[1..<3]))
            + pieces.apply(Array(history[3...]))
        #expect(all == split)
        #expect(whole == pieces)
    }

    /// The seq of a change is the cluster's base plus its revision, the same on every copy; the base comes from a
    /// snapshot or the watch, and a later value never moves it.
    @Test func seqFromTheBaseAndTheRevision() {
        var fromWatch = ClusterReplica()
        #expect(fromWatch.seq(at: 5) == nil)
        _ = fromWatch.apply([put(.cluster, "1795235829510000", at: 2)])
        #expect(fromWatch.seq(at: 5) == 1_795_235_829_510_005)
        _ = fromWatch.apply([put(.cluster, "1000", at: 3)])
        #expect(fromWatch.seqBase == 1_795_235_829_510_000)
        var fromSnapshot = ClusterReplica()
        _ = fromSnapshot.load(
            snapshot: [EtcdKeyValue(key: keys.key(.cluster), value: "1795235829510000")], revision: 9)
        #expect(fromSnapshot.seq(at: 10) == fromWatch.seq(at: 10))
    }

    /// A `cluster` value no base could be (too large to add a revision to, or not a number: an operator's edit) is
    /// ignored, from the watch and from a snapshot, and a base once learned stays whatever a snapshot says later.
    @Test func aBadBaseIsIgnoredAndALearnedOneStays() {
        var replica = ClusterReplica()
        _ = replica.apply([put(.cluster, "18446744073709551615", at: 2)])
        #expect(replica.seqBase == nil)
        _ = replica.load(snapshot: [EtcdKeyValue(key: keys.key(.cluster), value: "not a number")], revision: 3)
        #expect(replica.seqBase == nil)
        _ = replica.load(snapshot: [EtcdKeyValue(key: keys.key(.cluster), value: "1795235829510000")], revision: 4)
        #expect(replica.seq(at: 5) == 1_795_235_829_510_005)
        _ = replica.load(snapshot: [EtcdKeyValue(key: keys.key(.cluster), value: "1000")], revision: 6)
        #expect(replica.seqBase == 1_795_235_829_510_000)
    }

    /// A session put without a live incarnation (by hand: no node's lease would ever end it) is not taken, from the
    /// watch or from a snapshot; one put with its incarnation is.
    @Test func aSessionWithoutALiveIncarnationIsIgnored() {
        let orphan = ClusterKeys.SessionKey(incarnation: b, id: "1")
        let owned = ClusterKeys.SessionKey(incarnation: a, id: "1")
        var replica = ClusterReplica()
        let changes = replica.apply([
            put(.session(orphan), "mallory", at: 2), put(.node(a), "{}", at: 3), put(.session(owned), "ann", at: 3),
        ])
        #expect(replica.sessions == [owned: "ann"])
        #expect(!changes.contains { if case .sessionPut(orphan, _, _) = $0 { true } else { false } })
        var loaded = ClusterReplica()
        _ = loaded.load(
            snapshot: [
                EtcdKeyValue(key: keys.key(.node(a)), value: "{}"),
                EtcdKeyValue(key: keys.key(.session(owned)), value: "ann"),
                EtcdKeyValue(key: keys.key(.session(orphan)), value: "mallory"),
            ], revision: 9)
        #expect(loaded.sessions == [owned: "ann"])
    }
}
