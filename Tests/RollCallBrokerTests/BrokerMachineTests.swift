import RollCallCluster
import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

@testable import RollCallBroker

extension String {
    var id: UserID { UserID(validating: self)! }
    var group: GroupID { GroupID(validating: self)! }
}

/// A machine on a clock the test moves, with what it asked the loop to do.
struct Scripted {
    var machine: BrokerMachine
    var now = BrokerTime(milliseconds: 1_000_000)

    init(
        cluster: Bool = false, testMode: Bool = false, graceMilliseconds: Int64 = 0,
        configure: (inout BrokerConfiguration) -> Void = { _ in }
    ) {
        var configuration = BrokerConfiguration()
        configuration.brokerID = "b1"
        configuration.testMode = testMode
        configuration.presence.offlineGraceMilliseconds = graceMilliseconds
        configure(&configuration)
        var core = PresenceCore(configuration: configuration.presence)
        core.tracksChanges = false
        let publishing: Publishing =
            cluster ? .cluster(ClusterSide(nodeID: "n1", presence: configuration.presence)) : .local
        machine = BrokerMachine(configuration: configuration, epoch: "e1", core: core, publishing: publishing)
        if cluster { machine.clusterNodeReads(acceptsSessions: true, seqBase: 1_000) }
    }

    /// What the machine asked for since the last call; the buffer is emptied as the loop empties it.
    mutating func effects() -> [BrokerMachine.Effect] {
        defer { machine.effects.removeAll(keepingCapacity: true) }
        return machine.effects
    }

    /// The records the effects publish, in order.
    mutating func published() -> [PresenceRecord] {
        effects().compactMap { if case .publish(let record) = $0 { record } else { nil } }
    }

    mutating func request(
        _ request: Request, connection: ConnectionID? = nil, access: Access = .open
    ) -> Result<Reply, PresenceError> {
        switch machine.handle(request, connection: connection, access: access, now: now) {
        case .reply(let reply): return reply
        case .advanceClock(let milliseconds): return .failure(PresenceError(.badRequest, "advance \(milliseconds)"))
        case .afterEtcd(let ticket): return .failure(PresenceError(.badRequest, "waits for etcd: ticket \(ticket)"))
        }
    }

    /// A privacy edit on a node of a cluster: the ticket of its reply, which waits for etcd; `nil` if it was answered
    /// at once.
    mutating func edit(_ request: Request, access: Access = .open) -> UInt64? {
        guard case .afterEtcd(let ticket) = machine.handle(request, connection: nil, access: access, now: now) else {
            return nil
        }
        return ticket
    }

    /// The replies that waited for etcd among `effects`, in order.
    static func answers(_ effects: [BrokerMachine.Effect]) -> [(ticket: UInt64, reply: Result<Reply, PresenceError>)] {
        effects.compactMap { if case .answer(let ticket, let reply) = $0 { (ticket, reply) } else { nil } }
    }

    /// Opens a session and returns its id (the effects of the hello are left for the test).
    mutating func hello(
        _ user: String, status: Status = .online, ttl: Int64? = nil, connection: ConnectionID? = nil,
        access: Access = .open
    ) throws -> SessionID {
        let reply = request(
            .hello(PresenceCore.Hello(user: user.id, status: status, ttlMilliseconds: ttl)), connection: connection,
            access: access)
        guard case .success(.hello(let granted)) = reply else { throw Failure("hello of \(user): \(reply)") }
        return granted.session
    }

    mutating func advance(_ milliseconds: Int64) {
        now = now + milliseconds
        machine.tick(now: now)
    }

    mutating func query(_ users: String..., access: Access = .open, connection: ConnectionID? = nil) throws
        -> [PresenceRecord]
    {
        let reply = request(.query(users: users.map(\.id)), connection: connection, access: access)
        guard case .success(.query(let records, _)) = reply else { throw Failure("query: \(reply)") }
        return records
    }
}

struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The broker's own rules, decided by ``BrokerMachine`` without sockets, threads or a clock.
@Suite("Broker machine: a single broker")
struct BrokerMachineTests {
    /// A hello publishes the user's online record before its reply is sent (the loop carries out the effects, then
    /// replies), and nothing else.
    @Test func helloPublishesOnlineOnce() throws {
        var broker = Scripted()
        _ = try broker.hello("alice")
        let records = broker.published()
        #expect(records.map(\.user) == ["alice".id])
        #expect(records.first?.status == .online)
        #expect(records.first?.sessions == 1)
        #expect(broker.effects().isEmpty)
    }

    /// Each status change is one publication, in the order of the requests, with growing seqs.
    @Test func statusChangesPublishInOrder() throws {
        var broker = Scripted()
        let session = try broker.hello("alice")
        _ = broker.effects()
        #expect(broker.request(.status(session: session, status: .away, text: "lunch")) == .success(.done))
        broker.now = broker.now + 1
        #expect(broker.request(.status(session: session, status: .busy, text: nil)) == .success(.done))
        let records = broker.published()
        #expect(records.map(\.status) == [.away, .busy])
        #expect(records.map(\.text) == ["lunch", nil])
        #expect(records[0].seq < records[1].seq)
    }

    /// A status that says nothing new publishes nothing.
    @Test func sameStatusPublishesNothing() throws {
        var broker = Scripted()
        let session = try broker.hello("alice")
        _ = broker.effects()
        #expect(broker.request(.status(session: session, status: .online, text: nil)) == .success(.done))
        #expect(broker.effects().isEmpty)
    }

    /// A heartbeat renews the session and publishes nothing.
    @Test func heartbeatPublishesNothing() throws {
        var broker = Scripted()
        let session = try broker.hello("alice")
        _ = broker.effects()
        #expect(broker.request(.heartbeat(session: session)) == .success(.done))
        #expect(broker.effects().isEmpty)
    }

    /// A held status (`after_ms`) answers `held`, publishes nothing until its time, and then exactly its record.
    @Test func heldStatusWaitsForItsTime() throws {
        var broker = Scripted()
        let session = try broker.hello("alice", ttl: 60_000)
        _ = broker.effects()
        let reply = broker.request(.status(session: session, status: .offline, text: nil, afterMilliseconds: 5_000))
        #expect(reply == .success(.held))
        broker.advance(4_999)
        #expect(broker.effects().isEmpty)
        broker.advance(1)
        #expect(broker.published().map(\.status) == [.offline])
    }

    /// A bye publishes offline with reason `bye`; a second bye of the same session is refused and publishes nothing.
    @Test func byeEndsOnce() throws {
        var broker = Scripted()
        let session = try broker.hello("alice")
        _ = broker.effects()
        #expect(broker.request(.bye(session: session)) == .success(.done))
        let records = broker.published()
        #expect(records.map(\.status) == [.offline])
        #expect(records.first?.reason == .bye)
        guard case .failure(let error) = broker.request(.bye(session: session)) else {
            Issue.record("a second bye was taken")
            return
        }
        #expect(error.code == .unknownSession)
        #expect(broker.effects().isEmpty)
    }

    /// A session that stops heartbeating ends at its TTL on the moved clock, with reason `timeout`.
    @Test func silentSessionEndsAtItsTTL() throws {
        var broker = Scripted()
        _ = try broker.hello("alice", ttl: 3_000)
        _ = broker.effects()
        broker.advance(2_999)
        #expect(broker.effects().isEmpty)
        broker.advance(1)
        let records = broker.published()
        #expect(records.map(\.status) == [.offline])
        #expect(records.first?.reason == .timeout)
    }

    /// A closed connection ends its sessions after the grace period, with reason `closed`; another connection's
    /// session stays.
    @Test func closedConnectionEndsItsSessionsAfterTheGrace() throws {
        var broker = Scripted(graceMilliseconds: 2_000)
        _ = try broker.hello("alice", ttl: 60_000, connection: ConnectionID(1))
        _ = try broker.hello("bob", ttl: 60_000, connection: ConnectionID(2))
        _ = broker.effects()
        _ = broker.machine.connectionClosed(ConnectionID(1), now: broker.now)
        #expect(broker.effects().isEmpty)
        broker.advance(1_999)
        #expect(broker.effects().isEmpty)
        broker.advance(1)
        let records = broker.published()
        #expect(records.map(\.user) == ["alice".id])
        #expect(records.first?.reason == .closed)
        #expect(try broker.query("bob").first?.status == .online)
    }

    /// A `user` key may not act on another user's session: `forbidden`, and nothing changes.
    @Test func refusedRequestChangesNothing() throws {
        var broker = Scripted()
        let session = try broker.hello("alice", access: .role(.user("alice".id)))
        _ = broker.effects()
        let reply = broker.request(
            .status(session: session, status: .away, text: nil), access: .role(.user("bob".id)))
        guard case .failure(let error) = reply else {
            Issue.record("bob changed alice's status")
            return
        }
        #expect(error.code == .forbidden)
        #expect(broker.effects().isEmpty)
        #expect(try broker.query("alice").first?.status == .online)
    }

    /// A `user` key opens sessions for its own user only.
    @Test func helloForAnotherUserIsForbidden() throws {
        var broker = Scripted()
        let reply = broker.request(
            .hello(PresenceCore.Hello(user: "alice".id)), access: .role(.user("bob".id)))
        guard case .failure(let error) = reply else {
            Issue.record("bob opened a session as alice")
            return
        }
        #expect(error.code == .forbidden)
        #expect(broker.effects().isEmpty)
        #expect(try broker.query("alice").first?.sessions == 0)
    }

    /// A revoked key may do nothing, not even read.
    @Test func revokedKeyMayDoNothing() throws {
        var broker = Scripted()
        _ = try broker.hello("alice")
        _ = broker.effects()
        guard case .failure(let error) = broker.request(.query(users: ["alice".id]), access: .revoked) else {
            Issue.record("a revoked key read presence")
            return
        }
        #expect(error.code == .forbidden)
    }

    /// `advance` is an unknown op outside test mode; in test mode the machine asks the loop to move its clock.
    @Test func advanceOnlyInTestMode() {
        var broker = Scripted()
        if case .failure(let error) = broker.request(.advance(milliseconds: 10)) {
            #expect(error.code == .unknownOp)
        } else {
            Issue.record("advance outside test mode was taken")
        }
        var test = Scripted(testMode: true)
        let answer = test.machine.handle(.advance(milliseconds: 10), connection: nil, access: .open, now: test.now)
        guard case .advanceClock(let milliseconds) = answer else {
            Issue.record("advance in test mode: \(answer)")
            return
        }
        #expect(milliseconds == 10)
    }

    /// An invisible user is offline (bye) to others, and the truth to its own connection and to operators.
    @Test func invisibleIsTheTruthOnlyForItsOwnAndOperators() throws {
        var broker = Scripted()
        _ = try broker.hello("alice", status: .invisible, connection: ConnectionID(7))
        #expect(broker.published().allSatisfy { $0.status == .offline })
        let stranger = try broker.query("alice", access: .role(.user("bob".id)))
        #expect(stranger.first?.status == .offline)
        #expect(stranger.first?.sessions == 0)
        let own = try broker.query("alice", access: .role(.user("bob".id)), connection: ConnectionID(7))
        #expect(own.first?.status == .invisible)
        #expect(try broker.query("alice", access: .role(.operator)).first?.status == .invisible)
    }

    /// `query` answers each user once, with where each was first named.
    @Test func queryAnswersEachUserOnce() throws {
        var broker = Scripted()
        let reply = broker.request(.query(users: ["bob".id, "alice".id, "bob".id]))
        guard case .success(.query(let records, let positions)) = reply else {
            Issue.record("query: \(reply)")
            return
        }
        #expect(records.map(\.user) == ["bob".id, "alice".id])
        #expect(positions == [0, 1])
    }

    /// `ping` names the broker and the run, and no cluster on a single broker.
    @Test func pingNamesTheBroker() {
        var broker = Scripted()
        guard case .success(.ping(let info)) = broker.request(.ping) else {
            Issue.record("no ping reply")
            return
        }
        #expect(info.broker == "b1")
        #expect(info.epoch == "e1")
        #expect(info.time == broker.now)
        #expect(info.cluster == nil)
    }

    /// A group edit answers at once; its message goes out at the group's flush, on the moved clock.
    @Test func groupMessageGoesOutAtTheFlush() throws {
        var broker = Scripted()
        _ = try broker.hello("alice")
        _ = broker.effects()
        let reply = broker.request(.group("team".group, GroupEdit(members: ["alice".id, "bob".id])))
        guard case .success(.group(let snapshot)) = reply else {
            Issue.record("group: \(reply)")
            return
        }
        #expect(snapshot.counts.online == 1)
        #expect(snapshot.counts.offline == 1)
        let batch = broker.machine.configuration.presence.groupBatchMilliseconds
        broker.advance(batch)
        let groups = broker.effects().compactMap { if case .publishGroup(let update, _) = $0 { update } else { nil } }
        #expect(groups.map(\.group) == ["team".group])
    }

    /// A group reply holds at most one page: what the smallest record could fill `maxReplyBytes` with.
    @Test func groupReplyIsOnePage() throws {
        var broker = Scripted { $0.maxReplyBytes = 64 * 10 }
        let members = (0..<50).map { "m\($0)".id }
        let reply = broker.request(.group("big".group, GroupEdit(members: members)))
        guard case .success(.group(let snapshot)) = reply else {
            Issue.record("group: \(reply)")
            return
        }
        #expect(snapshot.members.count <= broker.machine.groupPageLimit)
        #expect(snapshot.members.count < 50)
        #expect(snapshot.next != nil)
    }

    /// `ungroup` publishes the group's deletion message and answers whether there was such a group.
    @Test func ungroupPublishesTheDeletion() throws {
        var broker = Scripted()
        _ = broker.request(.group("team".group, GroupEdit(members: ["alice".id])))
        _ = broker.effects()
        #expect(broker.request(.ungroup("team".group)) == .success(.ungroup(deleted: true)))
        let deleted = broker.effects().compactMap { if case .publishGroup(let u, _) = $0 { u.deleted } else { nil } }
        #expect(deleted == [true])
        #expect(broker.request(.ungroup("team".group)) == .success(.ungroup(deleted: false)))
    }

    /// A new subscriber's replay is the user's current record, without a new seq.
    @Test func replayIsTheCurrentRecord() throws {
        var broker = Scripted()
        _ = try broker.hello("alice")
        let published = broker.published()
        broker.machine.replay(.presence("alice".id), now: broker.now + 5)
        let replayed = broker.published()
        #expect(replayed.count == 1)
        #expect(replayed.first?.seq == published.first?.seq)
        #expect(replayed.first?.status == .online)
    }

    /// Sessions' steps are reported for the debug log only when asked for.
    @Test func sessionStepsOnlyWhenLogged() throws {
        var quiet = Scripted()
        _ = try quiet.hello("alice")
        quiet.machine.noteSessionEvents(now: quiet.now)
        #expect(!quiet.effects().contains { if case .sessionSteps = $0 { true } else { false } })

        var configuration = BrokerConfiguration()
        configuration.testMode = true
        var machine = BrokerMachine(
            configuration: configuration, epoch: "e", core: PresenceCore(configuration: configuration.presence),
            publishing: .local, logsSessionSteps: true)
        _ = machine.handle(
            .hello(PresenceCore.Hello(user: "alice".id)), connection: nil, access: .open,
            now: BrokerTime(milliseconds: 1))
        machine.noteSessionEvents(now: BrokerTime(milliseconds: 1))
        let steps = machine.effects.compactMap { if case .sessionSteps(let events) = $0 { events } else { nil } }
        #expect(steps.count == 1)
        #expect(steps.first?.count == 1)
    }

    /// A bye read before its connection's close is a bye: the close that follows ends nothing more.
    @Test func byeBeforeTheCloseIsABye() throws {
        var broker = Scripted()
        let session = try broker.hello("alice", connection: ConnectionID(3))
        _ = broker.effects()
        _ = broker.request(.bye(session: session), connection: ConnectionID(3))
        #expect(broker.machine.connectionClosed(ConnectionID(3), now: broker.now) == 0)
        let records = broker.published()
        #expect(records.map(\.reason) == [.bye])
    }

    /// Sessions of one user add up: one ending leaves the user online with one session.
    @Test func sessionsOfOneUserAddUp() throws {
        var broker = Scripted()
        let phone = try broker.hello("alice")
        _ = try broker.hello("alice")
        _ = broker.effects()
        _ = broker.request(.bye(session: phone))
        let records = broker.published()
        #expect(records.map(\.status) == [.online])
        #expect(records.map(\.sessions) == [1])
    }

    /// A new subscriber of a group gets its aggregate at once.
    @Test func replayOfAGroupIsItsAggregate() throws {
        var broker = Scripted()
        _ = try broker.hello("alice")
        _ = broker.request(.group("team".group, GroupEdit(members: ["alice".id, "bob".id])))
        _ = broker.effects()
        broker.machine.replay(.group("team".group), now: broker.now)
        let updates = broker.effects().compactMap { if case .publishGroup(let u, _) = $0 { u } else { nil } }
        #expect(updates.count == 1)
        #expect(updates.first?.counts.online == 1)
        #expect(updates.first?.counts.offline == 1)
    }
}
