import RollCallCore
import Testing

@Suite("Remote sessions (cluster)")
struct RemoteSessionTests {
    typealias Description = PresenceCore.SessionDescription
    typealias Stamp = PresenceCore.Stamp

    let alice = UserID(validating: "alice")!
    let t0 = BrokerTime(milliseconds: 1_000_000)

    /// Two cores fed the same changes at different local times make the same records: time and seq come from the
    /// change's stamp, not from the core's clock.
    @Test func sameChangesMakeTheSameRecords() {
        var a = PresenceCore()
        var b = PresenceCore()
        let changes: [(SessionID, Description?, Stamp)] = [
            (SessionID("n1/1"), Description(user: alice, device: "phone", status: .online), Stamp(time: t0, seq: 500)),
            (SessionID("n2/1"), Description(user: alice, status: .busy, text: "call"), Stamp(time: t0 + 10, seq: 501)),
            (SessionID("n1/1"), nil, Stamp(time: t0 + 20, seq: 502)),
            (SessionID("n2/1"), nil, Stamp(time: t0 + 30, seq: 503)),
        ]
        var fromA: [PresenceRecord] = []
        var fromB: [PresenceRecord] = []
        for (index, (id, description, stamp)) in changes.enumerated() {
            let nowA = t0 + Int64(5 + index)
            let nowB = t0 + Int64(900 + index * 7)
            if let description {
                fromA += a.putRemoteSession(id, description, stamp: stamp, now: nowA).records
                fromB += b.putRemoteSession(id, description, stamp: stamp, now: nowB).records
            } else {
                fromA += a.endRemoteSession(id, reason: .nodeLost, stamp: stamp, now: nowA).records
                fromB += b.endRemoteSession(id, reason: .nodeLost, stamp: stamp, now: nowB).records
            }
        }
        #expect(fromA == fromB)
        #expect(fromA.map(\.seq) == [500, 501, 502, 503])
        #expect(fromA.map(\.status) == [.online, .online, .busy, .offline])
        #expect(fromA.last?.reason == .nodeLost && fromA.last?.lastSeen == t0 + 30)
        #expect(a.sessionCount == 0 && a.remoteSessionCount == 0)
    }

    /// With the log on, a user's entries take the stamps' offsets: a second change of the user in one revision
    /// replaces the first's entry, at the first's offset; a privacy choice earlier in a revision (which takes the
    /// revision's seq and makes no entry) does not keep the change after it out of the log.
    @Test func stampedOffsetsNameTheLogsEntries() {
        var core = PresenceCore()
        core.startLog(after: 0)
        func stamp(_ revision: UInt64, _ place: UInt64) -> Stamp {
            Stamp(
                time: t0, seq: 1_000 + revision, offset: revision << 20 | place,
                revisionOffsets: revision << 20...revision << 20 | 0xF_FFFF)
        }
        let id = SessionID("n1/1")
        _ = core.putRemoteSession(id, Description(user: alice, status: .online), stamp: stamp(40, 0), now: t0)
        _ = core.putRemoteSession(id, Description(user: alice, status: .busy), stamp: stamp(40, 1), now: t0)
        #expect(core.takeTransitions().map { "\($0.offset) \($0.record.status)" } == ["\(40 << 20) busy"])
        #expect(core.record(of: alice, now: t0).offset == 40 << 20)

        core.setChoices(
            alice, PrivacyChoices(policy: PrivacyPolicy(visibility: .contacts)), stamp: stamp(41, 0), now: t0)
        _ = core.putRemoteSession(id, Description(user: alice, status: .away), stamp: stamp(41, 1), now: t0)
        #expect(core.takeTransitions().map { "\($0.offset) \($0.record.status)" } == ["\(41 << 20 | 1) away"])
        #expect(core.logOffset == 41 << 20 | 1)
    }

    /// A remote session never times out, and no request can name it: only the store ends it.
    @Test func remoteSessionsHaveNoTTLAndCannotBeNamed() {
        var core = PresenceCore()
        let id = SessionID("n1/7")
        _ = core.putRemoteSession(
            id, Description(user: alice, status: .online), stamp: Stamp(time: t0, seq: 1), now: t0)
        #expect(core.tick(now: t0 + 86_400_000).isEmpty)
        #expect(core.record(of: alice, now: t0).status == .online)
        #expect(core.user(of: id) == nil && core.user(ofAnySession: id) == alice)
        #expect(core.heartbeat(session: id, now: t0).reply.isFailure(.unknownSession))
        #expect(core.bye(session: id, now: t0).reply.isFailure(.unknownSession))
    }

    /// A seq below the user's last one is raised above it: seqs only grow. Several changes of one user in one
    /// revision share its seq (the broker publishes the last of them only: BrokerMachine+Cluster.swift).
    @Test func seqOnlyGrows() {
        var core = PresenceCore()
        let first = core.putRemoteSession(
            SessionID("n1/1"), Description(user: alice, status: .online), stamp: Stamp(time: t0, seq: 900), now: t0)
        let second = core.putRemoteSession(
            SessionID("n1/1"), Description(user: alice, status: .away), stamp: Stamp(time: t0, seq: 900), now: t0)
        #expect(first.records.map(\.seq) == [900] && second.records.map(\.seq) == [900])
        let lower = core.putRemoteSession(
            SessionID("n1/1"), Description(user: alice, status: .busy), stamp: Stamp(time: t0, seq: 800), now: t0)
        #expect(lower.records.map(\.seq) == [901])
    }

    /// A remote invisible session counts for nobody, as a local one.
    @Test func invisibleRemoteSessionIsLeftOut() {
        var core = PresenceCore()
        let updates = core.putRemoteSession(
            SessionID("n1/1"), Description(user: alice, status: .invisible), stamp: Stamp(time: t0, seq: 5), now: t0)
        #expect(updates.isEmpty)
        #expect(core.visibleSessionCount == 0 && core.trueRecord(of: alice, now: t0).status == .invisible)
    }
}

extension Result where Failure == PresenceError {
    fileprivate func isFailure(_ code: ErrorCode) -> Bool {
        if case .failure(let error) = self { return error.code == code }
        return false
    }
}
