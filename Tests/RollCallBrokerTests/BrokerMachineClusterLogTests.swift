import RollCallCluster
import RollCallCore
import RollCallWire
import Testing

@testable import RollCallBroker

/// The presence log on a node of a cluster (docs/history.md, "On a cluster"): offsets and the epoch come from etcd,
/// so that every node names the same transition alike; a snapshot in place of etcd's history is a hole the log
/// refuses to continue across.
@Suite("Broker machine: the presence log on a node of a cluster")
struct BrokerMachineClusterLogTests {
    static let incarnation = ClusterKeys.Incarnation(node: "n2", lease: 7)

    /// A node whose view keeps the log, as LoopStart makes it for a node with a data directory.
    static func node() -> Scripted {
        var node = Scripted(cluster: true)
        node.machine.withPublished { $0.startLog(after: 0) }
        node.machine.logEpoch = nil
        return node
    }

    static func session(_ id: String) -> ClusterKeys.SessionKey {
        ClusterKeys.SessionKey(incarnation: incarnation, id: id)
    }

    static func value(_ user: String, _ status: Status, at time: Int64) -> String {
        ClusterValues.encode(
            PresenceCore.SessionDescription(user: user.id, status: status), at: BrokerTime(milliseconds: time))
    }

    /// Revision 40: carol online, bob online, carol busy.
    static let carolTwiceInRevision40: [ClusterReplica.Change] = [
        .sessionPut(Self.session("1"), value: Self.value("carol", .online, at: 10), revision: 40),
        .sessionPut(Self.session("2"), value: Self.value("bob", .online, at: 10), revision: 40),
        .sessionPut(Self.session("1"), value: Self.value("carol", .busy, at: 10), revision: 40),
    ]

    /// Each change is numbered by its revision and its place in it; a user changed twice in one revision has one
    /// entry (the revision's last record, which is what the node publishes), at the offset of the first change.
    @Test func offsetsComeFromRevisionsAndPlaces() {
        var node = Self.node()
        node.machine.applyClusterChanges(
            Self.carolTwiceInRevision40
                + [.sessionPut(Self.session("2"), value: Self.value("bob", .away, at: 11), revision: 41)],
            now: node.now)
        let (_, entries) = node.machine.takeLog()
        let place = { (revision: Int64, ordinal: Int) in UInt64(revision) << 20 | UInt64(ordinal) }
        #expect(entries.map(\.offset) == [place(40, 0), place(40, 1), place(41, 0)])
        #expect(entries.map { "\($0.record.user) \($0.record.status)" } == ["carol busy", "bob online", "bob away"])
        #expect(entries.allSatisfy { $0.record.offset == $0.offset })
        let published = node.published()
        #expect(published.map(\.offset) == [place(40, 0), place(40, 1), place(41, 0)])
        #expect(node.machine.logOffset == place(41, 0))
    }

    /// The node keeps its log under the cluster's epoch, named by the `seq` base: asked for once, from offset 0; and
    /// again, from the offsets handed out so far, after the writer started the log over under an epoch of its own.
    @Test func theLogIsKeptUnderTheClustersEpoch() {
        var node = Self.node()
        node.machine.clusterNodeReads(acceptsSessions: true, seqBase: 0x1234)
        let first = node.machine.takeLog().control
        #expect(first.start == LogStart(epoch: "0000000000001234", floor: 0))
        #expect(node.machine.logEpoch == "0000000000001234")
        node.machine.clusterNodeReads(acceptsSessions: true, seqBase: 0x1234)
        #expect(node.machine.takeLog().control.start == nil)

        node.machine.applyClusterChanges(
            [.sessionPut(Self.session("1"), value: Self.value("carol", .online, at: 10), revision: 40)], now: node.now)
        node.machine.logEpoch = "a1b2c3d4e5f60718"  // the writer started the log over
        node.machine.clusterNodeReads(acceptsSessions: true, seqBase: 0x1234)
        #expect(node.machine.takeLog().control.start == LogStart(epoch: "0000000000001234", floor: 40 << 20 | 0xF_FFFF))
    }

    /// A snapshot raises the floor over everything at or below its revision and keeps its own entries; `ping`
    /// reports the end of the revision, from which a client continues; the snapshot's records go out without an
    /// offset (a client holding part of them has no cursor another node could continue), later ones with theirs.
    @Test func aSnapshotIsAFloor() throws {
        var node = Self.node()
        node.machine.clusterNodeReads(acceptsSessions: true, seqBase: 0x1234)
        _ = node.machine.takeLog()
        node.machine.clusterReported(
            [
                .snapshot(
                    revision: 90,
                    changes: [.sessionPut(Self.session("1"), value: Self.value("carol", .online, at: 10), revision: 90)]
                )
            ], acceptsSessions: true, seqBase: 0x1234, now: node.now)
        let (control, entries) = node.machine.takeLog()
        let end: UInt64 = 90 << 20 | 0xF_FFFF
        #expect(control.floor == LogFloor(through: end, keepFrom: 90 << 20))
        #expect(entries.map(\.offset) == [90 << 20])
        var out: [BrokerMachine.Effect] = []
        _ = node.machine.takeEffects(into: &out, logged: .max, monotonic: 0)
        let published: [PresenceRecord] = out.compactMap { if case .publish(let record) = $0 { record } else { nil } }
        #expect(published.map(\.user) == ["carol".id] && published.map(\.offset) == [nil])
        guard case .success(.ping(let info)) = node.request(.ping) else {
            Issue.record("no ping reply")
            return
        }
        #expect(info.log == LogPosition(epoch: "0000000000001234", offset: end))

        node.machine.applyClusterChanges(
            [.sessionPut(Self.session("1"), value: Self.value("carol", .busy, at: 11), revision: 91)], now: node.now)
        _ = node.machine.takeEffects(into: &out, logged: .max, monotonic: 0)
        let offsets: [UInt64?] = out.compactMap { if case .publish(let record) = $0 { record.offset } else { nil } }
        #expect(offsets == [91 << 20])
    }

    /// A node's position is the end of the last revision it applied whole, whether or not that revision made an
    /// entry: a cursor another node gave at that position is not "ahead" of this one.
    @Test func thePositionIsTheLastRevisionApplied() throws {
        var node = Self.node()
        node.machine.clusterNodeReads(acceptsSessions: true, seqBase: 0x1234)
        node.machine.applyClusterChanges(
            [
                .sessionPut(Self.session("1"), value: Self.value("carol", .online, at: 10), revision: 40),
                .groupDeleted("nobody", revision: 41),
            ], now: node.now)
        #expect(node.machine.logOffset == 40 << 20)
        #expect(node.machine.visibleLogOffset == 41 << 20 | 0xF_FFFF)
    }

    /// Publications of one revision go out in offset order, also when a user changed twice in it keeps the first
    /// change's offset at the last change's place.
    @Test func aRevisionsRecordsGoOutInOffsetOrder() {
        var node = Self.node()
        node.machine.applyClusterChanges(Self.carolTwiceInRevision40, now: node.now)
        let published = node.published()
        #expect(published.map(\.user) == ["carol".id, "bob".id])
        #expect(published.map(\.offset) == [40 << 20, 40 << 20 | 1])
        #expect(published.first?.status == .busy)
    }
}
