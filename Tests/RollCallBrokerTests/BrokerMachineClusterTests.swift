import RollCallCluster
import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

@testable import RollCallBroker

/// A node of a cluster's rules: its sessions go to etcd, and what it publishes comes back from etcd's history.
@Suite("Broker machine: a node of a cluster")
struct BrokerMachineClusterTests {
    static let incarnation = ClusterKeys.Incarnation(node: "n2", lease: 7)

    /// The etcd writes among the effects.
    static func writes(_ effects: [BrokerMachine.Effect]) -> [ClusterNode.Write] {
        effects.compactMap { if case .clusterWrite(let write) = $0 { write } else { nil } }
    }

    /// Another node's session of carol, online since 10 ms, as etcd's revision 40 brings it; its key.
    static func carolOnline(on node: inout Scripted) -> ClusterKeys.SessionKey {
        let key = ClusterKeys.SessionKey(incarnation: incarnation, id: "3")
        let value = ClusterValues.encode(
            PresenceCore.SessionDescription(user: "carol".id, status: .online), at: BrokerTime(milliseconds: 10))
        node.machine.applyClusterChanges([.sessionPut(key, value: value, revision: 40)], now: node.now)
        _ = node.effects()
        return key
    }

    static func hasPublication(_ effects: [BrokerMachine.Effect]) -> Bool {
        effects.contains {
            switch $0 {
            case .publish, .publishGroup: true
            default: false
            }
        }
    }

    /// A hello on a node is a session written to etcd under a number, not a publication: every node publishes the
    /// record when etcd's history brings it back.
    @Test func helloIsAWriteNotAPublication() throws {
        var node = Scripted(cluster: true)
        _ = try node.hello("alice")
        let effects = node.effects()
        #expect(!Self.hasPublication(effects))
        let writes = Self.writes(effects)
        #expect(writes.count == 1)
        guard case .putSession(let id, let value, nil) = writes.first else {
            Issue.record("not a session put: \(writes)")
            return
        }
        #expect(id == "1")
        #expect(ClusterValues.decodeSession(value)?.0.user == "alice".id)
        #expect(ClusterValues.decodeSession(value)?.1 == node.now)
    }

    /// A status change is a put of the same session number with the new value.
    @Test func statusChangeIsAPutOfTheSameNumber() throws {
        var node = Scripted(cluster: true)
        let session = try node.hello("alice")
        _ = node.effects()
        #expect(node.request(.status(session: session, status: .busy, text: "call")) == .success(.done))
        let writes = Self.writes(node.effects())
        guard case .putSession("1", let value, nil) = writes.first, writes.count == 1 else {
            Issue.record("not one put of session 1: \(writes)")
            return
        }
        #expect(ClusterValues.decodeSession(value)?.0.status == .busy)
        #expect(ClusterValues.decodeSession(value)?.0.text == "call")
    }

    /// A bye ends the session in etcd with its user's key saying why and when.
    @Test func byeWritesTheEnding() throws {
        var node = Scripted(cluster: true)
        let session = try node.hello("alice")
        _ = node.effects()
        node.now = node.now + 250
        #expect(node.request(.bye(session: session)) == .success(.done))
        let writes = Self.writes(node.effects())
        guard case .endSession("1", let user?) = writes.first, writes.count == 1 else {
            Issue.record("not one end of session 1: \(writes)")
            return
        }
        #expect(user.id == "alice")
        #expect(ClusterValues.decodeEnding(user.record) == ClusterValues.Ending(reason: .bye, time: node.now))
    }

    /// A node cut off from etcd takes no new session, no renewal, no change and no read (it cannot vouch for
    /// them), but takes a bye: an end is true whatever happens to the lease.
    @Test func cutOffNodeRefusesAllButBye() throws {
        var node = Scripted(cluster: true)
        let session = try node.hello("alice")
        _ = node.effects()
        node.machine.clusterNodeReads(acceptsSessions: false, seqBase: 1_000)
        let refused: [Request] = [
            .hello(PresenceCore.Hello(user: "bob".id)), .heartbeat(session: session),
            .status(session: session, status: .away, text: nil), .query(users: ["alice".id]),
            .group("team".group, GroupEdit()), .ungroup("team".group),
        ]
        for request in refused {
            guard case .failure(let error) = node.request(request) else {
                Issue.record("\(request.op) was taken while cut off")
                continue
            }
            #expect(error.code == .clusterUnavailable, "\(request.op)")
        }
        // Nothing is written but, once, the note that the refused session is not to be written again at a rejoin.
        #expect(Self.writes(node.effects()) == [.abandonIfRejoined(id: "1")])
        #expect(node.request(.bye(session: session)) == .success(.done))
        #expect(Self.writes(node.effects()).count == 1)
    }

    /// The node's window (``NodeMembership``) and the machine on one moved clock: a status just inside the window is
    /// acknowledged and written, one just past it is refused with cluster_unavailable and nothing is written, like a
    /// heartbeat; the window runs from the sending of the renewal that etcd answered, so an answered renewal opens it
    /// again from then.
    @Test func aStatusJustInsideTheWindowIsTakenJustPastItRefused() throws {
        // A 3 s lease: the node serves until 2 s after the last answered renewal was sent.
        var membership = NodeMembership(configuration: NodeMembership.Configuration(leaseMs: 3_000))
        _ = membership.handle(.start(nowMs: 0))
        _ = membership.handle(.leaseGranted(7, nowMs: 0))
        _ = membership.handle(.snapshotLoaded(revision: 1, nowMs: 10))
        #expect(membership.handle(.tick(nowMs: 1_000)).contains(.keepAlive(lease: 7)))
        _ = membership.handle(.keepAliveAnswered(leaseAlive: true, nowMs: 1_000))
        var node = Scripted(cluster: true)
        let session = try node.hello("alice")
        _ = node.effects()
        func ask(_ request: Request, atNodeMs nodeMs: Int64) -> Result<Reply, PresenceError> {
            node.machine.clusterNodeReads(acceptsSessions: membership.window.accepts(nowMs: nodeMs), seqBase: 1_000)
            return node.request(request)
        }
        let busy = Request.status(session: session, status: .busy, text: nil)
        #expect(ask(busy, atNodeMs: 2_999) == .success(.done))
        #expect(Self.writes(node.effects()).count == 1)
        // The keep-alive sent at 2_000 is not answered yet at 3_000: the window from 1_000 has closed.
        #expect(membership.handle(.tick(nowMs: 2_000)).contains(.keepAlive(lease: 7)))
        let away = Request.status(session: session, status: .away, text: nil)
        for request in [away, .heartbeat(session: session)] {
            guard case .failure(let error) = ask(request, atNodeMs: 3_000) else {
                Issue.record("\(request.op) was acknowledged past the window")
                continue
            }
            #expect(error.code == .clusterUnavailable)
        }
        #expect(Self.writes(node.effects()) == [.abandonIfRejoined(id: "1")])
        // It is answered (at 3_300, say): the window runs from its sending, 2_000, to 4_000.
        _ = membership.handle(.keepAliveAnswered(leaseAlive: true, nowMs: 2_000))
        #expect(ask(away, atNodeMs: 3_999) == .success(.done))
        #expect(Self.writes(node.effects()).count == 1)
        guard case .failure(let error) = ask(busy, atNodeMs: 4_000) else {
            Issue.record("a status was acknowledged at the end of the window")
            return
        }
        #expect(error.code == .clusterUnavailable)
    }

    /// A session whose put etcd refused for good (not for the lease) ends on its node as node_lost and its end is
    /// written, so that no change the node acknowledged lives on the node alone; its client learns it from
    /// unknown_session on its next request.
    @Test func aSessionWhosePutEtcdRefusedEnds() throws {
        var node = Scripted(cluster: true)
        let session = try node.hello("alice")
        let kept = try node.hello("bob")
        let puts = Self.writes(node.effects())
        guard puts.count == 2, case .putSession("1", _, _) = puts[0] else {
            Issue.record("not two session puts: \(puts)")
            return
        }
        node.machine.clusterWriteFailed(puts[0], now: node.now)
        let writes = Self.writes(node.effects())
        guard case .endSession("1", let user?) = writes.first, writes.count == 1 else {
            Issue.record("not one end of session 1: \(writes)")
            return
        }
        #expect(ClusterValues.decodeEnding(user.record)?.reason == .nodeLost)
        guard case .failure(let error) = node.request(.heartbeat(session: session)) else {
            Issue.record("the session whose put was refused still answers")
            return
        }
        #expect(error.code == .unknownSession)
        // Another refused write (a group's definition, a session's end) ends no session.
        node.machine.clusterWriteFailed(.putGroup(id: "team", definition: "{\"members\":[]}"), now: node.now)
        node.machine.clusterWriteFailed(writes[0], now: node.now)
        #expect(Self.writes(node.effects()).isEmpty)
        #expect(node.request(.heartbeat(session: kept)) == .success(.done))
    }

    /// `ping` on a node says where it stands.
    @Test func pingSaysWhereTheNodeStands() {
        var node = Scripted(cluster: true)
        #expect(node.machine.clusterStateChanged(to: .live(lease: Self.incarnation.lease), now: node.now) == true)
        guard case .success(.ping(let info)) = node.request(.ping) else {
            Issue.record("no ping reply")
            return
        }
        #expect(info.cluster?.node == "n1")
        #expect(info.cluster?.state == .live)
        node.machine.clusterNodeReads(acceptsSessions: false, seqBase: 1_000)
        guard case .success(.ping(let later)) = node.request(.ping) else { return }
        #expect(later.cluster?.state == .cutOff)
    }

    /// A session put from etcd publishes the record with the time its node wrote and the seq its revision gives,
    /// the same on every node.
    @Test func sessionFromEtcdPublishesWithItsRevisionsSeq() {
        var node = Scripted(cluster: true)
        let written = BrokerTime(milliseconds: 500_000)
        let value = ClusterValues.encode(PresenceCore.SessionDescription(user: "carol".id, status: .away), at: written)
        let key = ClusterKeys.SessionKey(incarnation: Self.incarnation, id: "3")
        node.machine.applyClusterChanges([.sessionPut(key, value: value, revision: 42)], now: node.now)
        let records = node.published()
        #expect(records.count == 1)
        #expect(records.first?.user == "carol".id)
        #expect(records.first?.status == .away)
        #expect(records.first?.seq == 1_042)
        #expect(records.first?.since == written)
    }

    /// A session's end and its user's key written in one revision: the end takes the reason and time the node wrote
    /// in the key, not this node's clock.
    @Test func endingTakesTheReasonAndTimeItsNodeWrote() {
        var node = Scripted(cluster: true)
        let key = Self.carolOnline(on: &node)
        let ending = ClusterValues.encode(ClusterValues.Ending(reason: .timeout, time: BrokerTime(milliseconds: 90)))
        node.machine.applyClusterChanges(
            [.sessionEnded(key, .ended, revision: 41), .userPut("carol", value: ending, revision: 41)], now: node.now)
        let records = node.published()
        #expect(records.count == 1)
        #expect(records.first?.status == .offline)
        #expect(records.first?.reason == .timeout)
        #expect(records.first?.lastSeen == BrokerTime(milliseconds: 90))
        #expect(records.first?.seq == 1_041)
    }

    /// A value in etcd that cannot be read is left out with a warning, and publishes nothing.
    @Test func unreadableSessionIsLeftOutWithAWarning() {
        var node = Scripted(cluster: true)
        let key = ClusterKeys.SessionKey(incarnation: Self.incarnation, id: "9")
        node.machine.applyClusterChanges([.sessionPut(key, value: "not json", revision: 5)], now: node.now)
        let effects = node.effects()
        #expect(!Self.hasPublication(effects))
        #expect(effects.contains { if case .warning = $0 { true } else { false } })
    }

    /// A group edit on a node is applied to the cluster's view for the reply and written whole to etcd; a read
    /// writes nothing.
    @Test func groupEditIsWrittenWhole() {
        var node = Scripted(cluster: true)
        let reply = node.request(.group("team".group, GroupEdit(members: ["alice".id, "bob".id])))
        guard case .success(.group(let snapshot)) = reply else {
            Issue.record("group: \(reply)")
            return
        }
        #expect(snapshot.counts.offline == 2)
        let writes = Self.writes(node.effects())
        guard case .putGroup("team", let definition) = writes.first, writes.count == 1 else {
            Issue.record("not one group put: \(writes)")
            return
        }
        #expect(ClusterValues.decodeMembers(definition)?.sorted() == ["alice".id, "bob".id])
        _ = node.request(.group("team".group, GroupEdit()))
        #expect(Self.writes(node.effects()).isEmpty)
    }

    /// `ungroup` on a node deletes the group in etcd.
    @Test func ungroupIsDeletedInEtcd() {
        var node = Scripted(cluster: true)
        _ = node.request(.group("team".group, GroupEdit(members: ["alice".id])))
        _ = node.effects()
        #expect(node.request(.ungroup("team".group)) == .success(.ungroup(deleted: true)))
        #expect(Self.writes(node.effects()) == [.deleteGroup(id: "team")])
    }

    /// The node's standing changes for clients only when what they see changes.
    @Test func standingChangesOnlyWhenClientsSeeIt() {
        var node = Scripted(cluster: true)
        #expect(node.machine.clusterStateChanged(to: .joining(attempt: 1), now: node.now) == false)
        #expect(node.machine.clusterStateChanged(to: .live(lease: 7), now: node.now) == true)
        #expect(node.machine.clusterStateChanged(to: .live(lease: 7), now: node.now) == false)
    }

    /// What the node reports reaches the machine in order, with what the node says now: a standing clients can see
    /// is logged and sent out in a broker heartbeat at once (once, not again for the same standing); the cluster's
    /// changes are published; a write etcd refused is logged and its session ended.
    @Test func whatTheNodeReportsIsTakenInOrder() throws {
        var node = Scripted(cluster: true)
        let session = try node.hello("alice")
        guard let put = Self.writes(node.effects()).first else {
            Issue.record("no session put")
            return
        }
        let key = ClusterKeys.SessionKey(incarnation: Self.incarnation, id: "3")
        let carol = ClusterValues.encode(
            PresenceCore.SessionDescription(user: "carol".id, status: .online), at: BrokerTime(milliseconds: 10))
        node.machine.clusterReported(
            [
                .state(.live(lease: 7)), .changes([.sessionPut(key, value: carol, revision: 40)]),
                .state(.live(lease: 7)),
            ],
            acceptsSessions: true, seqBase: 1_000, now: node.now)
        let effects = node.effects()
        let kinds = effects.map { effect -> String in
            switch effect {
            case .notice(let message, _): message
            case .publishHeartbeat: "heartbeat"
            case .publish(let record): "publish \(record.user) \(record.seq)"
            default: "other"
            }
        }
        #expect(kinds == ["cluster node live", "heartbeat", "publish carol 1040"])
        #expect(node.request(.heartbeat(session: session)) == .success(.done))

        node.machine.clusterReported(
            [.writeFailed(put, "etcd said no")], acceptsSessions: true, seqBase: 1_000, now: node.now)
        let failed = node.effects()
        #expect(
            failed.contains {
                if case .warning(_, let metadata) = $0 { metadata["reason"] == "etcd said no" } else { false }
            })
        #expect(Self.writes(failed).count == 1)
        guard case .failure(let error) = node.request(.heartbeat(session: session)) else {
            Issue.record("the session whose put was refused still answers")
            return
        }
        #expect(error.code == .unknownSession)

        // What the node says now decides the next requests: past its window, a hello is refused.
        node.machine.clusterReported([], acceptsSessions: false, seqBase: 1_000, now: node.now)
        guard case .failure(let refused) = node.request(.hello(.init(user: "dan".id))) else {
            Issue.record("a hello past the window was taken")
            return
        }
        #expect(refused.code == .clusterUnavailable)
    }

    /// A session whose client was refused past the window does not outlive a rejoin: it is marked once, and after
    /// the node joins under a new lease it ends here as node_lost (its end written) and its client is told
    /// unknown_session. One whose client came back while the lease lived is not touched, nor is a session whose
    /// client was never refused.
    @Test func aRefusedSessionEndsWhenTheNodeRejoinsUnderANewLease() throws {
        var node = Scripted(cluster: true)
        #expect(node.machine.clusterStateChanged(to: .live(lease: 7), now: node.now) == true)
        let refused = try node.hello("alice")
        let cameBack = try node.hello("bob")
        let untouched = try node.hello("carol")
        _ = node.effects()
        node.machine.clusterReported([], acceptsSessions: false, seqBase: 1_000, now: node.now)
        for session in [refused, refused, cameBack] {
            #expect(node.request(.heartbeat(session: session)) != .success(.done))
        }
        #expect(Self.writes(node.effects()) == [.abandonIfRejoined(id: "1"), .abandonIfRejoined(id: "2")])
        // The window opens again under the same lease: bob's client comes back; nothing ends.
        node.machine.clusterReported(
            [.state(.live(lease: 7))], acceptsSessions: true, seqBase: 1_000, now: node.now)
        #expect(node.request(.heartbeat(session: cameBack)) == .success(.done))
        #expect(Self.writes(node.effects()).isEmpty)
        // Refused again, then the lease runs out and the node joins under a new one.
        node.machine.clusterReported([], acceptsSessions: false, seqBase: 1_000, now: node.now)
        #expect(node.request(.status(session: refused, status: .away, text: nil)) != .success(.done))
        _ = node.effects()
        node.machine.clusterReported(
            [.state(.joining(attempt: 1)), .state(.live(lease: 8))], acceptsSessions: true, seqBase: 1_000,
            now: node.now)
        let writes = Self.writes(node.effects())
        guard case .endSession("1", let user?) = writes.first, writes.count == 1 else {
            Issue.record("not one end of alice's session: \(writes)")
            return
        }
        #expect(ClusterValues.decodeEnding(user.record)?.reason == .nodeLost)
        guard case .failure(let error) = node.request(.heartbeat(session: refused)) else {
            Issue.record("the refused session outlived the rejoin")
            return
        }
        #expect(error.code == .unknownSession)
        for session in [cameBack, untouched] {
            #expect(node.request(.heartbeat(session: session)) == .success(.done))
        }
    }

    /// A single broker has no cluster side: nothing it does writes to etcd.
    @Test func singleBrokerWritesNothingToEtcd() throws {
        var broker = Scripted()
        let session = try broker.hello("alice")
        _ = broker.request(.bye(session: session))
        broker.machine.noteSessionEvents(now: broker.now)
        #expect(Self.writes(broker.effects()).isEmpty)
        #expect(broker.machine.clusterRefusal == nil)
    }

    /// A closed connection's sessions end in etcd (when the grace is 0, at once), not on this node's topics.
    @Test func closedConnectionIsAnEndInEtcd() throws {
        var node = Scripted(cluster: true)
        _ = try node.hello("alice", connection: ConnectionID(4))
        _ = node.effects()
        _ = node.machine.connectionClosed(ConnectionID(4), now: node.now)
        node.machine.noteSessionEvents(now: node.now)
        let effects = node.effects()
        #expect(!Self.hasPublication(effects))
        guard case .endSession("1", let user?) = Self.writes(effects).first else {
            Issue.record("no end of session 1: \(effects)")
            return
        }
        #expect(ClusterValues.decodeEnding(user.record)?.reason == .closed)
    }

    /// The stamp of a lost incarnation's end, as etcd's revision `revision` brings it.
    static func stamp(_ time: BrokerTime, revision: Int64) -> ClusterReplica.Change {
        .lossStamped(
            incarnation, value: ClusterValues.encode(ClusterValues.Ending(reason: .nodeLost, time: time)),
            revision: revision)
    }

    /// The stamp writes among the effects.
    static func stampWrites(_ effects: [BrokerMachine.Effect]) -> [(ClusterKeys.Incarnation, ClusterValues.Ending?)] {
        writes(effects).compactMap {
            if case .stampLoss(let lost, let ending) = $0 { (lost, ClusterValues.decodeEnding(ending)) } else { nil }
        }
    }

    /// The sessions of a lost node end with reason `node_lost` and the seq of the loss's revision, at the time
    /// stamped in etcd, not at this node's: the node asks etcd to stamp the loss with its time and publishes
    /// nothing until a stamp comes back.
    @Test func lostNodesSessionsEndAtTheStampInEtcd() throws {
        var node = Scripted(cluster: true)
        let key = Self.carolOnline(on: &node)
        node.machine.applyClusterChanges([.sessionEnded(key, .nodeLost, revision: 50)], now: node.now)
        let effects = node.effects()
        #expect(!Self.hasPublication(effects))
        let asked = Self.stampWrites(effects)
        #expect(asked.count == 1)
        #expect(asked.first?.0 == Self.incarnation)
        #expect(asked.first?.1 == ClusterValues.Ending(reason: .nodeLost, time: node.now))
        // Another node's stamp, 7 ms earlier than this node's clock, wins.
        let stamped = node.now + -7
        node.now = node.now + 3
        node.machine.applyClusterChanges([Self.stamp(stamped, revision: 51)], now: node.now)
        let records = node.published()
        #expect(records.map(\.reason) == [.nodeLost])
        let record = try #require(records.first)
        #expect(record.seq == 1_050)
        #expect(record.since == stamped)
        #expect(record.lastSeen == stamped)
    }

    /// Two nodes whose clocks differ by 11 ms, fed the same etcd history (the loss, then the stamp the first of
    /// them wrote), publish identical records: the one that lost the race adopts the winner's time.
    @Test func twoNodesFedTheSameHistoryPublishTheSameRecord() throws {
        var first = Scripted(cluster: true)
        var second = Scripted(cluster: true)
        second.now = first.now + 11
        var asked: [ClusterValues.Ending?] = []
        for index in 0..<2 {
            var node = index == 0 ? first : second
            let key = Self.carolOnline(on: &node)
            node.machine.applyClusterChanges([.sessionEnded(key, .nodeLost, revision: 50)], now: node.now)
            asked += Self.stampWrites(node.effects()).map(\.1)
            if index == 0 { first = node } else { second = node }
        }
        #expect(asked.count == 2 && asked[0] != asked[1])
        // etcd took the first node's stamp; the second node's transaction changed nothing.
        let winner = try #require(asked[0]).time
        first.machine.applyClusterChanges([Self.stamp(winner, revision: 51)], now: first.now + 2)
        second.machine.applyClusterChanges([Self.stamp(winner, revision: 51)], now: second.now + 1)
        let records = [first.published(), second.published()]
        #expect(records[0].count == 1)
        #expect(records[0] == records[1])
        #expect(records[0].first?.since == winner && records[0].first?.lastSeen == winner)
        #expect(records[0].first?.reason == .nodeLost)
    }

    /// A revision that changes a user twice (here two of carol's sessions in one transaction; a snapshot's load does
    /// the same) publishes one record, the last, at that revision's seq: not one at the revision's seq and another at
    /// the next revision's, which every other node gives to another record (issue #21, the fault run's bug 1).
    @Test func aRevisionThatChangesAUserTwicePublishesOneRecordAtItsSeq() throws {
        var node = Scripted(cluster: true)
        _ = Self.carolOnline(on: &node)
        let other = ClusterKeys.Incarnation(node: "n3", lease: 9)
        let busy = ClusterValues.encode(
            PresenceCore.SessionDescription(user: "carol".id, status: .busy), at: BrokerTime(milliseconds: 20))
        let away = ClusterValues.encode(
            PresenceCore.SessionDescription(user: "carol".id, status: .away), at: BrokerTime(milliseconds: 20))
        node.machine.applyClusterChanges(
            [
                .sessionPut(ClusterKeys.SessionKey(incarnation: other, id: "4"), value: busy, revision: 60),
                .sessionPut(ClusterKeys.SessionKey(incarnation: other, id: "5"), value: away, revision: 60),
            ], now: node.now)
        let records = node.published()
        #expect(records.count == 1)
        #expect(records.first?.seq == 1_060)
        #expect(records.first?.sessions == 3)
        // The next revision takes the next seq, as on every node.
        node.machine.applyClusterChanges(
            [.sessionPut(ClusterKeys.SessionKey(incarnation: other, id: "6"), value: busy, revision: 61)], now: node.now
        )
        #expect(node.published().map(\.seq) == [1_061])
    }

    /// Changes after a loss wait with it for its stamp, so that every user's records keep etcd's order; the stamp
    /// may come in the same batch as they do.
    @Test func changesAfterALossWaitForItsStamp() throws {
        var node = Scripted(cluster: true)
        let key = Self.carolOnline(on: &node)
        let dave = ClusterKeys.SessionKey(incarnation: ClusterKeys.Incarnation(node: "n3", lease: 9), id: "1")
        let daveOnline = ClusterValues.encode(
            PresenceCore.SessionDescription(user: "dave".id, status: .online), at: BrokerTime(milliseconds: 20))
        node.machine.applyClusterChanges(
            [.sessionEnded(key, .nodeLost, revision: 50), .sessionPut(dave, value: daveOnline, revision: 51)],
            now: node.now)
        #expect(!Self.hasPublication(node.effects()))
        let stamped = node.now + -1
        node.machine.applyClusterChanges(
            [
                .sessionPut(dave, value: daveOnline.replacingOccurrences(of: "online", with: "busy"), revision: 52),
                Self.stamp(stamped, revision: 53),
            ], now: node.now)
        let records = node.published()
        #expect(records.map(\.user) == ["carol".id, "dave".id, "dave".id])
        #expect(records.map(\.seq) == [1_050, 1_051, 1_052])
        #expect(records.first?.since == stamped)
    }

    /// A node that gets no stamp (it cannot write to etcd or read it back) holds the loss's ends for the wait only,
    /// then ends them at the time it proposed, with a warning: nobody stays online for ever.
    @Test func withoutAStampTheEndsComeAfterTheWait() throws {
        var node = Scripted(cluster: true)
        let key = Self.carolOnline(on: &node)
        let proposed = node.now
        node.machine.applyClusterChanges([.sessionEnded(key, .nodeLost, revision: 50)], now: node.now)
        _ = node.effects()
        #expect(node.machine.nextDeadline == proposed + 1_000)
        node.advance(999)
        #expect(!Self.hasPublication(node.effects()))
        node.advance(1)
        let effects = node.effects()
        let records = effects.compactMap { if case .publish(let record) = $0 { record } else { nil } }
        #expect(records.map(\.reason) == [.nodeLost])
        #expect(records.first?.since == proposed && records.first?.seq == 1_050)
        #expect(effects.contains { if case .warning = $0 { true } else { false } })
        #expect(node.machine.nextDeadline == nil)
        // A stamp that comes later changes nothing already published.
        node.machine.applyClusterChanges([Self.stamp(proposed + -5, revision: 51)], now: node.now)
        #expect(!Self.hasPublication(node.effects()))
    }

    /// A join's replay of etcd's history publishes each user's record as the replay leaves it, once the node is
    /// live, not every record the history went through: carol's online, busy and away at revisions 40, 42 and 43
    /// come out as one record, away at seq 1043 (what the nodes that watched published last), after bob's at 1041.
    @Test func aReplayPublishesEachUsersLastRecordWhenTheNodeIsLive() throws {
        var node = Scripted(cluster: true)
        let carol = ClusterKeys.SessionKey(incarnation: Self.incarnation, id: "3")
        let bob = ClusterKeys.SessionKey(incarnation: Self.incarnation, id: "4")
        func session(_ user: String, _ status: Status, at time: Int64) -> String {
            ClusterValues.encode(
                PresenceCore.SessionDescription(user: user.id, status: status), at: BrokerTime(milliseconds: time))
        }
        func published(_ effects: [BrokerMachine.Effect]) -> [String] {
            effects.compactMap { effect in
                guard case .publish(let record) = effect else { return nil }
                return "\(record.user) \(record.status) \(record.seq)"
            }
        }
        node.machine.clusterReported(
            [
                .replayed([
                    .sessionPut(carol, value: session("carol", .online, at: 10), revision: 40),
                    .sessionPut(bob, value: session("bob", .online, at: 11), revision: 41),
                ]),
                .replayed([
                    .sessionPut(carol, value: session("carol", .busy, at: 12), revision: 42),
                    .sessionPut(carol, value: session("carol", .away, at: 13), revision: 43),
                ]),
            ],
            acceptsSessions: false, seqBase: 1_000, now: node.now)
        // New subscribers during the replay (of carol, and of dave, whom it has not touched) get their records when
        // it is over, not the history's record of the moment.
        node.machine.replay(.presence("carol".id), now: node.now)
        node.machine.replay(.presence("dave".id), now: node.now)
        #expect(published(node.effects()).isEmpty)
        node.machine.clusterReported([.state(.live(lease: 7))], acceptsSessions: true, seqBase: 1_000, now: node.now)
        #expect(published(node.effects()) == ["bob online 1041", "carol away 1043", "dave offline 0"])
        node.machine.replay(.presence("carol".id), now: node.now)
        #expect(published(node.effects()) == ["carol away 1043"])
        // Changes after the replay are published one by one again.
        node.machine.clusterReported(
            [.changes([.sessionPut(carol, value: session("carol", .online, at: 14), revision: 44)])],
            acceptsSessions: true, seqBase: 1_000, now: node.now)
        #expect(published(node.effects()) == ["carol online 1044"])
    }

}

/// Privacy on a node of a cluster (docs/privacy.md, "Clusters"): an edit is answered at once and the choice it
/// changes written to etcd whole; every node applies it when etcd's history brings it back, with the write's time and
/// revision.
@Suite("Broker machine: privacy on a node of a cluster")
struct BrokerMachineClusterPrivacyTests {
    /// The privacy choices among the etcd writes, in order.
    static func written(_ effects: [BrokerMachine.Effect]) -> [(key: ClusterKeys.PrivacyKey, value: String)] {
        BrokerMachineClusterTests.writes(effects).compactMap { write in
            guard case .putPrivacy(let key, let value) = write else { return nil }
            return (key, value)
        }
    }

    static func key(_ user: String, _ field: ClusterKeys.PrivacyField) -> ClusterKeys.PrivacyKey {
        ClusterKeys.PrivacyKey(user: user, field: field)
    }

    static let zoe = Access.role(.user("zoe".id))

    /// The error code of a reply, if it is a refusal.
    static func code(_ reply: Result<Reply, PresenceError>) -> ErrorCode? {
        if case .failure(let error) = reply { error.code } else { nil }
    }

    /// Two edits in a row on one node both hold (the second starts from what the first wrote, not from the view,
    /// which has not heard of it yet); each writes the one choice it changes; nothing is applied, nor answered,
    /// before etcd brings the writes back, and then hidden viewers get the record of the moment of the write.
    @Test func editsAreWrittenAndAppliedWhenTheyComeBack() throws {
        var node = Scripted(cluster: true)
        _ = BrokerMachineClusterTests.carolOnline(on: &node)
        let tickets = [
            node.edit(.contacts(user: "carol".id, .set(["bob".id]))),
            node.edit(.contacts(user: "carol".id, .add(["dan".id]))),
            node.edit(.privacy(user: "carol".id, visibility: .contacts, lastSeen: nil)),
        ].compactMap { $0 }
        #expect(tickets.count == 3 && Set(tickets).count == 3)
        let effects = node.effects()
        #expect(Scripted.answers(effects).isEmpty, "no reply before etcd has the edits")
        let written = Self.written(effects)
        #expect(
            written.map(\.key) == [
                Self.key("carol", .contacts), Self.key("carol", .contacts), Self.key("carol", .policy),
            ])
        var choices = PrivacyChoices()
        let times = written.map { ClusterValues.decode($0.key.field, $0.value, into: &choices) }
        #expect(
            choices == PrivacyChoices(policy: PrivacyPolicy(visibility: .contacts), contacts: ["bob".id, "dan".id]))
        #expect(times.allSatisfy { $0 == node.now })
        // Not applied yet: zoe still sees carol.
        #expect(try node.query("carol", access: Self.zoe).first?.status == .online)

        let madeAt = node.now
        node.now = node.now + 40  // etcd's answer comes later; the records frozen take the write's time
        node.machine.applyClusterChanges(
            [
                .privacyPut(written[0].key, value: written[0].value, revision: 49),
                .privacyPut(written[2].key, value: written[2].value, revision: 50),
                .privacyPut(written[1].key, value: written[1].value, revision: 51),
            ], now: node.now)
        let answers = Scripted.answers(node.effects())
        #expect(answers.map(\.ticket) == [tickets[0], tickets[2], tickets[1]], "answered as etcd brings them back")
        #expect(
            answers.map(\.reply) == [
                .success(.listCount(name: "contacts", count: 1)),
                .success(.privacy(PrivacyPolicy(visibility: .contacts))),
                .success(.listCount(name: "contacts", count: 2)),
            ])
        let hidden = try #require(try node.query("carol", access: Self.zoe).first)
        #expect(hidden.status == .offline && hidden.reason == .bye && hidden.sessions == 0)
        #expect(hidden.seq == 1_051)
        #expect(hidden.since == madeAt && hidden.lastSeen == madeAt)
        #expect(try node.query("carol", access: .role(.user("dan".id))).first?.status == .online)
        // The next edit starts from the view, which holds both now.
        #expect(node.edit(.block(user: "carol".id, .add(["dan".id]))) != nil)
        #expect(Self.written(node.effects()).map(\.key) == [Self.key("carol", .blocks)])
        #expect(node.machine.published.contacts(of: "carol".id) == ["bob".id, "dan".id])
    }

    /// Two nodes fed the same history at different times of their own clocks show a hidden viewer the same record,
    /// seq and times included: the one of the moment the write was made.
    @Test func everyNodeFreezesTheSameRecord() throws {
        var a = Scripted(cluster: true)
        var b = Scripted(cluster: true)
        b.now = a.now + 3_000
        _ = BrokerMachineClusterTests.carolOnline(on: &a)
        _ = BrokerMachineClusterTests.carolOnline(on: &b)
        let value = ClusterValues.encode(
            .policy, of: PrivacyChoices(policy: PrivacyPolicy(visibility: .nobody)), at: BrokerTime(milliseconds: 500))
        let change = ClusterReplica.Change.privacyPut(Self.key("carol", .policy), value: value, revision: 60)
        a.machine.applyClusterChanges([change], now: a.now)
        b.machine.applyClusterChanges([change], now: b.now)
        let onA = try #require(try a.query("carol", access: Self.zoe).first)
        let onB = try #require(try b.query("carol", access: Self.zoe).first)
        #expect(onA == onB)
        #expect(onA.status == .offline && onA.seq == 1_060 && onA.since == BrokerTime(milliseconds: 500))
    }

    /// A choice deleted from etcd by hand goes back to the default with the time etcd last held for it, the same on
    /// every node whatever its clock: bob, no longer a contact, is shown the bye of that moment.
    @Test func aChoiceDeletedByHandFreezesAtItsLastTime() throws {
        var a = Scripted(cluster: true)
        var b = Scripted(cluster: true)
        b.now = a.now + 5_000
        let written = BrokerTime(milliseconds: 700)
        let contacts = ClusterValues.encode(.contacts, of: PrivacyChoices(contacts: ["bob".id]), at: written)
        let policy = ClusterValues.encode(
            .policy, of: PrivacyChoices(policy: PrivacyPolicy(visibility: .contacts)), at: written)
        let history: [[ClusterReplica.Change]] = [
            [
                .privacyPut(Self.key("carol", .contacts), value: contacts, revision: 80),
                .privacyPut(Self.key("carol", .policy), value: policy, revision: 80),
            ],
            [.privacyDeleted(Self.key("carol", .contacts), revision: 81)],
        ]
        func replay(on node: inout Scripted) {
            _ = BrokerMachineClusterTests.carolOnline(on: &node)
            for changes in history { node.machine.applyClusterChanges(changes, now: node.now) }
        }
        replay(on: &a)
        replay(on: &b)
        let onA = try #require(try a.query("carol", access: .role(.user("bob".id))).first)
        let onB = try #require(try b.query("carol", access: .role(.user("bob".id))).first)
        #expect(onA.status == .offline && onA.since == written)
        #expect(onA == onB)
    }

    /// Privacy changes that a join replays reach the subscribers' views once, when the node is live, not at every
    /// step of the history.
    @Test func aReplayResendsViewsWhenTheNodeIsLive() throws {
        var node = Scripted(cluster: true)
        _ = BrokerMachineClusterTests.carolOnline(on: &node)
        let hidden = ClusterValues.encode(
            .policy, of: PrivacyChoices(policy: PrivacyPolicy(visibility: .nobody)), at: node.now)
        let shown = ClusterValues.encode(.policy, of: PrivacyChoices(), at: node.now)
        node.machine.clusterReported(
            [
                .replayed([
                    .privacyPut(Self.key("carol", .policy), value: hidden, revision: 90),
                    .privacyPut(Self.key("carol", .policy), value: shown, revision: 91),
                ])
            ], acceptsSessions: true, seqBase: 1_000, now: node.now)
        func resent(_ effects: [BrokerMachine.Effect]) -> [UserID] {
            effects.compactMap { if case .resendViews(let before) = $0 { before.user } else { nil } }
        }
        #expect(resent(node.effects()).isEmpty)
        node.machine.clusterReported([.state(.live(lease: 7))], acceptsSessions: true, seqBase: 1_000, now: node.now)
        #expect(resent(node.effects()) == ["carol".id])
    }

    /// A choice too large for one etcd request is refused with limit, and nothing is written.
    @Test func aChoiceTooLargeForEtcdIsRefused() throws {
        var node = Scripted(cluster: true) { $0.presence.maxContacts = 20_000 }
        let long = String(repeating: "x", count: 100)
        let many = (0..<10_000).map { UserID(validating: "\(long)\($0)")! }
        guard case .failure(let error) = node.request(.contacts(user: "carol".id, .set(many))) else {
            Issue.record("a list of a megabyte and more was taken")
            return
        }
        #expect(error.code == .limit)
        #expect(Self.written(node.effects()).isEmpty)
        #expect(node.edit(.contacts(user: "carol".id, .set(Array(many.prefix(5_000))))) != nil)
        #expect(Self.written(node.effects()).count == 1)
    }

    /// A `block` is answered once etcd has it and this node applies it, after the views it changes: bob is hidden
    /// before the client hears `ok`. The same block asked again before that changes nothing, and waits for the first.
    @Test func aBlockIsAnsweredAfterItHolds() throws {
        var node = Scripted(cluster: true)
        _ = BrokerMachineClusterTests.carolOnline(on: &node)
        let firstTicket = node.edit(.block(user: "carol".id, .add(["bob".id])))
        let first = try #require(firstTicket)
        let againTicket = node.edit(.block(user: "carol".id, .add(["bob".id])))
        let again = try #require(againTicket)
        let written = Self.written(node.effects())
        #expect(written.count == 1, "the second edit changes nothing and writes nothing")
        #expect(try node.query("carol", access: .role(.user("bob".id))).first?.status == .online)
        node.machine.applyClusterChanges(
            [.privacyPut(written[0].key, value: written[0].value, revision: 52)], now: node.now)
        let effects = node.effects()
        let answers = Scripted.answers(effects)
        #expect(answers.map(\.ticket) == [first, again])
        #expect(answers.allSatisfy { $0.reply == .success(.listCount(name: "blocks", count: 1)) })
        let views = effects.firstIndex { if case .resendViews = $0 { true } else { false } }
        let reply = effects.firstIndex { if case .answer = $0 { true } else { false } }
        #expect(views != nil && reply != nil && views! < reply!, "the views change before the reply goes")
        #expect(try node.query("carol", access: .role(.user("bob".id))).first?.status == .offline)
        // Once it is back, the same edit again is answered at once.
        #expect(
            node.request(.block(user: "carol".id, .add(["bob".id]))) == .success(.listCount(name: "blocks", count: 1)))
    }

    /// An edit whose write etcd refuses, one pending when the node loses etcd, and one that etcd never brings back
    /// in time (2 s) are answered `cluster_unavailable`: never `ok` for an edit etcd may not have. The last one,
    /// sent again, is written again (a write overtaken by a snapshot would never come back).
    @Test func anEditEtcdDoesNotConfirmIsAnsweredClusterUnavailable() throws {
        var node = Scripted(cluster: true)
        let refusedTicket = node.edit(.block(user: "carol".id, .add(["bob".id])))
        let refused = try #require(refusedTicket)
        let write = try #require(BrokerMachineClusterTests.writes(node.effects()).first)
        node.machine.clusterReported(
            [.writeFailed(write, "etcdserver: too many operations")], acceptsSessions: true, seqBase: 1_000,
            now: node.now)
        var answers = Scripted.answers(node.effects())
        #expect(answers.map(\.ticket) == [refused])
        #expect(answers.map { Self.code($0.reply) } == [.clusterUnavailable])

        node.machine.clusterReported([.state(.live(lease: 7))], acceptsSessions: true, seqBase: 1_000, now: node.now)
        let cutOffTicket = node.edit(.block(user: "carol".id, .add(["dan".id])))
        let cutOff = try #require(cutOffTicket)
        _ = node.effects()
        node.machine.clusterReported(
            [.state(.cutOff(lease: 7, sinceMs: 0))], acceptsSessions: false, seqBase: 1_000, now: node.now)
        answers = Scripted.answers(node.effects())
        #expect(answers.map(\.ticket) == [cutOff])
        #expect(answers.map { Self.code($0.reply) } == [.clusterUnavailable])

        node.machine.clusterReported([.state(.live(lease: 7))], acceptsSessions: true, seqBase: 1_000, now: node.now)
        let lostTicket = node.edit(.privacy(user: "carol".id, visibility: .nobody, lastSeen: nil))
        let lost = try #require(lostTicket)
        _ = node.effects()
        #expect(node.machine.nextDeadline == node.now + ClusterSide.editConfirmationMilliseconds)
        node.now = node.now + (ClusterSide.editConfirmationMilliseconds - 1)
        node.machine.tick(now: node.now)
        #expect(Scripted.answers(node.effects()).isEmpty)
        node.now = node.now + 1
        node.machine.tick(now: node.now)
        answers = Scripted.answers(node.effects())
        #expect(answers.map(\.ticket) == [lost])
        #expect(answers.map { Self.code($0.reply) } == [.clusterUnavailable])
        let againTicket = node.edit(.privacy(user: "carol".id, visibility: .nobody, lastSeen: nil))
        #expect(againTicket != nil)
        #expect(Self.written(node.effects()).count == 1, "sent again, the edit is written again")
    }

    /// A node with neither CURVE keys nor WebSocket tokens says once that the cluster's privacy choices have no
    /// effect on it (every peer is an operator there); a node with keys says nothing.
    @Test func aNodeWithoutIdentitiesWarnsOnce() throws {
        func warnings(_ node: inout Scripted) -> [String] {
            for (revision, user) in [(70, "carol"), (71, "dave")] {
                let value = ClusterValues.encode(
                    .policy, of: PrivacyChoices(policy: PrivacyPolicy(visibility: .nobody)), at: node.now)
                node.machine.applyClusterChanges(
                    [.privacyPut(Self.key(user, .policy), value: value, revision: Int64(revision))], now: node.now)
            }
            return node.effects().compactMap { if case .warning(let text, _) = $0 { text } else { nil } }
        }
        var open = Scripted(cluster: true)
        let said = warnings(&open)
        #expect(said.count == 1 && said.first?.contains("no effect") == true, "\(said)")
        var keyed = Scripted(cluster: true) { configuration in
            configuration.webSocket.jwtKeyFile = "/etc/rollcall/jwt.key"
        }
        #expect(warnings(&keyed).isEmpty)
    }

    /// A bad edit is refused as on a single broker and writes nothing; a node cut off from etcd refuses edits (and
    /// reads) of privacy with cluster_unavailable.
    @Test func refusedEditsWriteNothing() throws {
        var node = Scripted(cluster: true)
        guard case .failure(let twice) = node.request(.contacts(user: "carol".id, .set(["bob".id, "bob".id]))) else {
            Issue.record("a list naming bob twice was taken")
            return
        }
        #expect(twice.code == .badRequest)
        guard case .failure(let set) = node.request(.block(user: "carol".id, .set(["bob".id]))) else {
            Issue.record("block with set was taken")
            return
        }
        #expect(set.code == .badRequest)
        #expect(Self.written(node.effects()).isEmpty)
        node.machine.clusterNodeReads(acceptsSessions: false, seqBase: 1_000)
        guard case .failure(let cutOff) = node.request(.privacy(user: "carol".id, visibility: .nobody, lastSeen: nil))
        else {
            Issue.record("a cut-off node took a privacy edit")
            return
        }
        #expect(cutOff.code == .clusterUnavailable)
        #expect(Self.written(node.effects()).isEmpty)
    }
}
