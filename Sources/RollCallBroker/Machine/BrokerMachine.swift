import RollCallCluster
import RollCallCore
import RollCallSecurity
import RollCallWire

/// The broker's decisions, without sockets, threads or a clock: what a request does and answers, what a closed
/// connection ends, what a deadline fires, and, on a node of a cluster, what goes to etcd and what comes back.
/// Each input takes the time; what the broker must then do (publish a record or a group message, write to etcd,
/// warn) is appended to ``effects``, in order, for the event loop to carry out and clear (EventLoop.swift). The
/// loop's buffer is reused, so an input that publishes nothing allocates nothing for its effects.
///
/// The presence core decides what sessions and records are; this machine decides what the broker does with them:
/// who may ask what (``Authorization``), what a node cut off from its cluster may still acknowledge, and through
/// which core a record is published (``Publishing``).
struct BrokerMachine {
    /// What the loop must do after an input, in order.
    enum Effect {
        /// Publish a user's record on `presence/<user>/` (and to the WebSocket subscribers of that topic).
        case publish(PresenceRecord)
        /// Publish a group message; parts of a split message take new group seqs from `at`.
        case publishGroup(GroupUpdate, at: BrokerTime)
        /// Write to etcd (a node of a cluster): the change is published when it comes back.
        case clusterWrite(ClusterNode.Write)
        /// Publish the broker heartbeat now, out of its interval (a node's standing changed).
        case publishHeartbeat
        /// Something the operator should read in the log.
        case warning(String, [String: String])
        case notice(String, [String: String])
        /// Sessions' steps, for the debug log (with ``logsSessionSteps``).
        case sessionSteps([PresenceCore.SessionEvent])
        /// A user with privacy settings: publish the record on the update socket and give each WebSocket subscriber
        /// its own view (a subscription's last value).
        case publishViews(PresenceRecord)
        /// A user's privacy changed: each WebSocket subscriber whose view differs from `before` gets its new view.
        case resendViews(PrivacySnapshot)
        /// The reply to a request answered with ``Answer/afterEtcd(ticket:)``, now that etcd has the edit (or cannot).
        case answer(ticket: UInt64, Result<Reply, PresenceError>)
    }

    /// What answering a request takes.
    enum Answer {
        case reply(Result<Reply, PresenceError>)
        /// Test mode's `advance`: the loop moves its clock (EventLoop.advance(to:)), then replies.
        case advanceClock(milliseconds: Int64)
        /// A privacy edit on a node of a cluster: the reply waits until the edit is back from etcd, and comes as
        /// ``Effect/answer(ticket:_:)``; the loop holds the connection's later requests until then.
        case afterEtcd(ticket: UInt64)
    }

    let configuration: BrokerConfiguration
    /// Names this run of the broker (`ping`, the broker heartbeat).
    let epoch: String
    /// The presence log's epoch, when the broker keeps one: `ping` reports it with the latest offset. A node of a
    /// cluster learns it from the cluster's `seq` base as it joins (``clusterNodeReads(acceptsSessions:seqBase:)``).
    var logEpoch: String?
    /// What the store is to do to the log along with the transitions taken next (``takeLog()``): on a node of a
    /// cluster, keep it under the cluster's epoch, or raise its floor over a hole.
    var logControl: (start: LogStart?, floor: LogFloor?) = (nil, nil)
    /// This node's sessions: liveness, requests and replies. On a single broker it also publishes.
    var core: PresenceCore
    var publishing: Publishing
    /// What the loop is to carry out, in order; the loop takes it with ``takeEffects(into:logged:monotonic:)``.
    var effects: [Effect] = []
    /// Publications waiting until the presence log holds what they show (PublicationHold.swift), when the broker
    /// keeps a log.
    var hold: PublicationHold?
    /// Whether sessions' steps are reported (``Effect/sessionSteps(_:)``), for the debug log.
    let logsSessionSteps: Bool

    /// The largest number of records a `group` reply holds: no more than the smallest record could fill a reply
    /// of `maxReplyBytes` with.
    var groupPageLimit: Int { configuration.maxReplyBytes / Self.smallestRecordBytes + 1 }

    /// Fewer bytes than any member's entry in a reply takes (`"a":{"user":"a","status":"online",...}`).
    static let smallestRecordBytes = 64

    init(
        configuration: BrokerConfiguration, epoch: String, core: PresenceCore, publishing: Publishing,
        logsSessionSteps: Bool = false
    ) {
        self.configuration = configuration
        self.epoch = epoch
        self.core = core
        self.publishing = publishing
        self.logsSessionSteps = logsSessionSteps
        // A node of a cluster writes its sessions' steps to etcd.
        if case .cluster = publishing { self.core.recordsSessionEvents = true }
        if logsSessionSteps { self.core.recordsSessionEvents = true }
    }

    // MARK: Requests

    /// Authorizes and runs a request from `connection` (`nil`: a peer the loop does not track), with what its key or
    /// token allows, at `now`. A refused request changes nothing.
    mutating func handle(
        _ request: Request, connection: ConnectionID?, access: Access, now: BrokerTime
    ) -> Answer {
        if let refusal = Authorization.refusal(
            of: request, by: access, owner: { core.user(of: $0) }, isMember: { isMember($0, of: $1) })
        {
            return .reply(.failure(refusal))
        }
        if case .advance(let milliseconds) = request {
            guard configuration.testMode else {
                return .reply(.failure(PresenceError(.unknownOp, "unknown op 'advance'")))
            }
            return .advanceClock(milliseconds: milliseconds)
        }
        if case .cluster = publishing {
            switch request {
            case .privacy, .contacts, .block: return editClusterPrivacy(request, now: now)
            default: break
            }
        }
        let result = execute(request, connection: connection, access: access, now: now)
        // A node of a cluster writes each change with the value it had then: two changes of one session in one
        // round are two writes, and every node publishes both.
        if case .cluster = publishing { noteSessionEvents(now: now) }
        return .reply(result)
    }

    private mutating func execute(
        _ request: Request, connection: ConnectionID?, access: Access, now: BrokerTime
    ) -> Result<Reply, PresenceError> {
        // A node outside its window (no renewal answered for two thirds of its lease) acknowledges no renewal and no
        // change on its sessions: its lease may run out before etcd hears of it, and the client must fail over rather
        // than believe a change that no other node will ever see (docs/cluster.md, "Honest under partition"). A `bye`
        // is still taken: an end is true whatever happens to the lease, and a bye refused now would let the session
        // come back when the node joins again.
        if request.renewsSession, case .cluster = publishing {
            if let refusal = clusterRefusal {
                noteRefusal(of: request)
                return .failure(refusal)
            }
            noteRenewal(of: request)
        }
        switch request {
        case .hello(let hello):
            if let refusal = clusterRefusal { return .failure(refusal) }
            let session = SessionID(Token.random(bits: 96))
            let outcome = core.hello(hello, session: session, connection: connection, now: now)
            publishLocal(outcome.actions, now: now)
            return outcome.reply.map(Reply.hello)
        case .heartbeat(let session):
            return core.heartbeat(session: session, connection: connection, now: now).reply.map { .done }
        case .status(let session, let status, let text, let after?):
            return core.holdStatus(
                session: session, status: status, text: text, after: after, connection: connection, now: now
            ).reply.map { $0 ? .held : .done }
        case .status(let session, let status, let text, nil):
            let outcome = core.setStatus(
                session: session, status: status, text: text, connection: connection, now: now)
            publishLocal(outcome.actions, now: now)
            return outcome.reply.map { .done }
        case .bye(let session):
            let outcome = core.bye(session: session, now: now)
            publishLocal(outcome.actions, now: now)
            return outcome.reply.map { .done }
        case .query(let users):
            // A node cut off from the cluster cannot vouch for anyone's presence.
            if let refusal = clusterRefusal { return .failure(refusal) }
            // Where each distinct user was first named: a paged reply's `next` points back into the request.
            var seen = Set<UserID>()
            let positions = users.indices.filter { seen.insert(users[$0]).inserted }
            // The truth about an invisible user for the user's own keys and connections, and for operators.
            let core = self.core
            let seesTruth = { (user: UserID) in
                access.seesTruth(about: user)
                    || connection.map { core.connection($0, carriesSessionOf: user) } == true
            }
            // A user key or token reads others as its user may see them (docs/privacy.md).
            var viewer: UserID?
            if case .role(.user(let own)) = access { viewer = own }
            return published.query(users, now: now, viewer: viewer, seesTruth: seesTruth).map {
                .query($0, positions: positions)
            }
        case .ping:
            return .success(
                .ping(
                    BrokerInfo(
                        broker: configuration.brokerID, version: rollCallVersion, epoch: epoch, time: now,
                        testMode: configuration.testMode, cluster: publishing.standing,
                        // Not outside a node's window, where its log is not read (it may lag the cluster's).
                        log: clusterRefusal == nil
                            ? logEpoch.map { LogPosition(epoch: $0, offset: visibleLogOffset) } : nil)))
        case .advance:
            return .failure(PresenceError(.unknownOp, "unknown op 'advance'"))  // answered by `handle`
        case .queryAt, .history, .events:
            // Read from the log by the loop (Shell/StoreSide.swift), which has the file; never run here.
            return .failure(PresenceError(.noHistory, "this broker keeps no presence log"))
        case .group(let group, let edit, let after):
            // Group messages go out from the loop's flush, batched; the reply answers at once, with one page of
            // members.
            let result = editGroup(group, edit, after: after, now: now)
            // A user key reads the group as its user sees it: members who block that user count as offline.
            guard case .role(.user(let viewer)) = access else { return result.map(Reply.group) }
            return result.map { .group(groupSnapshot($0, for: viewer, now: now)) }
        case .privacy, .contacts, .block:
            return editPrivacy(request, now: now)
        case .ungroup(let group):
            if let refusal = clusterRefusal { return .failure(refusal) }
            let outcome = withPublished { $0.ungroup(group, now: now) }
            publish(outcome.actions, now: now)
            if case .success(true) = outcome.reply, case .cluster = publishing {
                effects.append(.clusterWrite(.deleteGroup(id: group.rawValue)))
            }
            return outcome.reply.map { .ungroup(deleted: $0) }
        }
    }

    /// `group`: a read answers from the published core. On a node of a cluster an edit is applied to the cluster's
    /// view for the reply, and its whole definition written to etcd, from where every other node applies it.
    private mutating func editGroup(
        _ group: GroupID, _ edit: GroupEdit, after: UserID?, now: BrokerTime
    ) -> Result<GroupSnapshot, PresenceError> {
        let limit = groupPageLimit
        guard case .cluster = publishing else { return core.group(group, edit, after: after, limit: limit, now: now) }
        // Reading too: a node cut off from the cluster cannot vouch for a group's counts.
        if let refusal = clusterRefusal { return .failure(refusal) }
        let result = withPublished { $0.group(group, edit, after: after, limit: limit, now: now) }
        if !edit.isReadOnly, case .success = result, let members = published.members(of: group) {
            effects.append(
                .clusterWrite(.putGroup(id: group.rawValue, definition: ClusterValues.encode(members: members))))
        }
        return result
    }

    // MARK: Connections and time

    /// A connection closed: its sessions end by the close path (the grace period applies).
    mutating func connectionClosed(_ connection: ConnectionID, now: BrokerTime) -> Int {
        let actions = core.connectionClosed(connection, now: now)
        publishLocal(actions, now: now)
        return actions.count
    }

    /// The CURVE keys of `connections` were removed from the authorized keys (SIGHUP): the sessions whose latest
    /// request came over them end at once, reason `revoked`, with no grace period (the loop then closes the
    /// connections, whose close ends nothing more). On a node of a cluster the ends are written to etcd. Returns how
    /// many sessions ended.
    mutating func revoke(_ connections: [ConnectionID], now: BrokerTime) -> Int {
        let before = core.sessionsEnded[.revoked, default: 0]
        for connection in connections {
            publishLocal(core.endSessions(onConnection: connection, reason: .revoked, now: now), now: now)
        }
        noteSessionEvents(now: now)
        return Int(core.sessionsEnded[.revoked, default: 0] - before)
    }

    /// Does what is due by `now`: sessions that expire, held statuses, group flushes, on this node's core and on the
    /// cluster's view.
    mutating func tick(now: BrokerTime) {
        publishLocal(core.tick(now: now), now: now)
        if case .cluster = publishing {
            applyHeldChanges(now: now)  // a lost node's ends whose stamp did not come in time
            answerUnconfirmedEdits(now: now)
            let actions = withPublished { $0.tick(now: now) }
            publish(actions, now: now)
        }
    }

    /// The earliest deadline of the core, of the cluster's view, and of the wait for a lost node's stamp.
    var nextDeadline: BrokerTime? {
        // Asked every loop round: no array, nothing allocated.
        func earliest(_ a: BrokerTime?, _ b: BrokerTime?) -> BrokerTime? {
            guard let a, let b else { return a ?? b }
            return min(a, b)
        }
        guard case .cluster(let side) = publishing else { return core.nextDeadline }
        return earliest(
            earliest(earliest(core.nextDeadline, side.view.nextDeadline), side.holdUntil),
            side.awaitedEdits.first.map { $0.since + ClusterSide.editConfirmationMilliseconds })
    }

    // MARK: Effects

    /// Moves the effects due to `out` (emptied first), in order: all of them, unless publications wait for the
    /// presence log (``hold``), which has committed through `logged` (``UInt64/max`` while it cannot write), at
    /// `monotonic` (the loop's monotonic clock, in milliseconds). Whether there is any.
    mutating func takeEffects(into out: inout [Effect], logged: UInt64, monotonic: Int64) -> Bool {
        hideOffsetsBelowFloor()
        out.removeAll(keepingCapacity: true)
        guard hold != nil else {
            swap(&out, &effects)
            return !out.isEmpty
        }
        let logOffset = logOffset
        hold?.pass(&effects, to: &out, logged: logged, logOffset: logOffset, now: monotonic)
        return !out.isEmpty
    }

    /// Whether effects wait to be taken, or may come out of the hold now.
    func hasEffects(logged: UInt64, monotonic: Int64) -> Bool {
        guard effects.isEmpty else { return true }
        guard let hold, hold.isHolding else { return false }
        return logged > hold.logged || hold.nextDeadline.map { $0 <= monotonic } == true
    }

    /// The latest offset of the presence log whose transition is out, or in the log: what `ping`, reads of the log
    /// and resumes go up to (PublicationHold.swift).
    var visibleLogOffset: UInt64 { hold?.visible(logOffset: logPosition) ?? logPosition }

    /// The latest offset handed out, by the core that publishes: what a read waits for, and what a publication that
    /// shows no record of its own (a group message, a privacy view) waits for.
    var logOffset: UInt64 { published.logOffset }

    /// How far the log is complete: on a node of a cluster, through the last revision it applied whole (which a
    /// cursor from another node may name, and which a snapshot leaves it at), else ``logOffset``.
    var logPosition: UInt64 {
        guard case .cluster(let side) = publishing else { return logOffset }
        return max(logOffset, side.logThrough)
    }

    /// The transitions made since the last call, in offset order, by the core that publishes, with what the store is
    /// to do to the log along with them (``logControl``).
    mutating func takeLog() -> (control: (start: LogStart?, floor: LogFloor?), entries: [LogEntry]) {
        let control = logControl
        logControl = (nil, nil)
        guard published.hasTransitions else { return (control, []) }
        return (control, withPublished { $0.takeTransitions() })
    }

    /// Takes the sessions' steps since the last call: on a node of a cluster each is written to etcd, and with
    /// ``logsSessionSteps`` they are reported for the log.
    mutating func noteSessionEvents(now: BrokerTime) {
        guard core.recordsSessionEvents else { return }
        let events = core.takeSessionEvents()
        guard !events.isEmpty else { return }
        if case .cluster = publishing { writeSessionEvents(events, now: now) }
        if logsSessionSteps { effects.append(.sessionSteps(events)) }
    }

    // MARK: Publishing

    /// The core whose records are published and read: the cluster's view on a node of a cluster, else the core.
    /// The broker heartbeat as of `now`, with the counts every subscriber may know of and `dropped`, the messages
    /// the update socket sent past full subscribers.
    func heartbeat(now: BrokerTime, dropped: UInt64) -> BrokerHeartbeat {
        let counts = published.publicCounts
        return BrokerHeartbeat(
            broker: configuration.brokerID, epoch: epoch, time: now,
            intervalMilliseconds: configuration.brokerHeartbeatMilliseconds, usersAvailable: counts.usersAvailable,
            sessions: counts.sessions, dropped: dropped, cluster: publishing.standing)
    }

    var published: PresenceCore { publishing.view ?? core }

    /// What a new subscriber of `topic` gets at once (the current record or group aggregate) as effects.
    mutating func replay(_ topic: Topic, now: BrokerTime) {
        switch topic {
        case .presence(let user):
            // During a join's replay the view is somewhere in etcd's history: the record comes when it is over.
            let afterTheReplay =
                withCluster { side in
                    guard side.replaying else { return false }
                    side.awaitingReplay.insert(user)
                    return true
                } ?? false
            if afterTheReplay { return }
            let record = published.record(of: user, now: now)
            effects.append(published.restricts(user) ? .publishViews(record) : .publish(record))
        case .group(let group):
            effects.append(.publishGroup(withPublished { $0.groupHeader(of: group, now: now) }, at: now))
        case .broker, .allPresence: break
        }
    }

    /// The `seq` of a later part of a split group message.
    mutating func issueGroupSeq(_ group: GroupID, now: BrokerTime) -> UInt64 {
        withPublished { $0.issueGroupSeq(group, now: now) }
    }

    /// Publishes what this node's core did. On a node of a cluster nothing: the change goes to etcd
    /// (``noteSessionEvents(now:)``) and is published when it comes back.
    private mutating func publishLocal(_ actions: [PresenceCore.Action], now: BrokerTime) {
        guard case .local = publishing else { return }
        publish(actions, now: now)
    }

    /// Publishes what the published core did.
    mutating func publish(_ actions: [PresenceCore.Action], now: BrokerTime) {
        for action in actions {
            switch action {
            case .publish(let record): effects.append(.publish(record))
            case .publishGroup(let update): effects.append(.publishGroup(update, at: now))
            }
        }
    }

    /// Runs `body` on the published core in place (the cluster's view, or the core), without copying it.
    mutating func withPublished<Result>(_ body: (inout PresenceCore) -> Result) -> Result {
        guard case .cluster(var side) = publishing else { return body(&core) }
        publishing = .local  // so that `side` holds the only reference to the view's storage
        defer { publishing = .cluster(side) }
        return body(&side.view)
    }

    /// Runs `body` on the cluster's side in place; `nil` on a single broker.
    mutating func withCluster<Result>(_ body: (inout ClusterSide) -> Result) -> Result? {
        guard case .cluster(var side) = publishing else { return nil }
        publishing = .local
        defer { publishing = .cluster(side) }
        return body(&side)
    }
}

/// Through which core records are published.
enum Publishing {
    /// A single broker: the core publishes its records as it makes them.
    case local
    /// A node of a cluster: the core publishes nothing; what its sessions do goes to etcd, and the cluster's view,
    /// fed only by etcd's history, publishes every record, this node's included, so that every node publishes the
    /// same record with the same `seq` (docs/cluster.md).
    case cluster(ClusterSide)

    /// The cluster's view, on a node of a cluster.
    var view: PresenceCore? {
        guard case .cluster(let side) = self else { return nil }
        return side.view
    }

    /// Where the node stands, as `ping` and the broker heartbeat say it; `nil` on a single broker.
    var standing: ClusterStanding? {
        guard case .cluster(let side) = self else { return nil }
        return side.standing
    }
}
