import RollCallCluster
import RollCallCore
import RollCallWire

/// A node of a cluster's side of the machine (docs/cluster.md): the cluster's view, built from etcd's history alone,
/// and what the node last reported. The node itself (its lease, its etcd calls) runs on its own threads
/// (ClusterLink.swift); the machine only reads what it reported and asks for writes.
struct ClusterSide {
    let nodeID: String
    /// The cluster's records and groups, changed only by etcd's history (PresenceCore+Remote.swift).
    var view: PresenceCore
    /// The node's state as last reported.
    var state: NodeMembership.State = .joining(attempt: 0)
    /// Whether the node is inside its window now (``ClusterNode/acceptsSessions``, decided by
    /// ``NodeMembership/Window``), as the loop read it before this round's requests.
    var acceptsSessions = false
    /// The cluster's `seq` base, once the node has joined (``ClusterReplica/seq(at:)``).
    var seqBase: UInt64?
    /// This node's live sessions by the number that names them in etcd: the session id is a secret, and everyone
    /// who can read etcd can read the keys.
    var numbers: [SessionID: UInt64] = [:]
    var lastNumber: UInt64 = 0
    /// Sessions named in a request refused with `cluster_unavailable` whose clients have not come back since
    /// (``BrokerMachine/noteRefusal(of:)``).
    var refused: Set<SessionID> = []
    /// The lease of the node's latest join: another one at the next `live` means the node joined again.
    var lease: Int64?
    /// The last value of each user's key: why and when their latest session ended, as its node wrote it.
    var endings: [String: ClusterValues.Ending] = [:]
    /// When each lost incarnation's sessions ended, as etcd holds it (``ClusterKeys/Entry/lost(_:)``): the first
    /// node to see the loss wrote it, and every node publishes those ends with that time.
    var lossStamps: [ClusterKeys.Incarnation: BrokerTime] = [:]
    /// The time this node proposed for a loss (the write it asked for): used only if no stamp comes in time.
    var proposedStamps: [ClusterKeys.Incarnation: BrokerTime] = [:]
    /// Changes not applied yet, in etcd's order: from the first revision that ends a lost incarnation's sessions
    /// without a stamp known, until that stamp comes (or ``lossStampWaitMilliseconds`` passes).
    var held: [ClusterReplica.Change] = []
    /// Each user's last record of a join's replay, published once the replay is over
    /// (``BrokerMachine/setReplayedRecordsAside(since:)``).
    var replayedRecords: [UserID: BrokerMachine.Effect] = [:]
    /// Whether a join's replay is under way: a new subscriber then gets its user's record when the replay is over,
    /// not the history's record of the moment (``awaitingReplay``).
    var replaying = false
    /// Users whose new subscribers came during a replay.
    var awaitingReplay: Set<UserID> = []
    /// The privacy choices this node wrote and has not read back from etcd yet: the next edit on this node starts
    /// from them, so that two edits in a row both hold (``BrokerMachine/editPrivacy(_:now:)``).
    var writtenPrivacy: [ClusterKeys.PrivacyKey: String] = [:]
    /// Privacy edits this node wrote to etcd whose replies wait for them to come back (oldest first): a `block`
    /// acknowledged is in etcd and holds on this node (``BrokerMachine/editClusterPrivacy(_:now:)``).
    var awaitedEdits: [AwaitedEdit] = []
    /// The ticket of the latest awaited edit.
    var lastTicket: UInt64 = 0
    /// How long an edit's reply waits for etcd before it is answered `cluster_unavailable` (broker milliseconds):
    /// etcd answers in milliseconds, a node cut off answers its awaited edits as soon as it knows, and a client's
    /// request timeout (3 s by default for `CommandClient`) should not run out first.
    static let editConfirmationMilliseconds: Int64 = 2_000
    /// The time of each privacy choice as etcd last held it: a key deleted by hand takes it, the same on every node.
    var choiceTimes: [ClusterKeys.PrivacyKey: BrokerTime] = [:]
    /// Each user's view of its subscribers before a join's replay changed the user's privacy: resent once the replay
    /// is over (``BrokerMachine/setReplayedRecordsAside(since:)``), not at every step of the history.
    var replayedViews: [UserID: PrivacySnapshot] = [:]
    /// The most bytes one privacy choice takes in etcd: a request to etcd is at most 1.5 MiB (`--max-request-bytes`),
    /// and a choice goes with its session's and the fence's operations (the bound was set when the JSON gateway sent
    /// values in base64, 4/3 of their size, and kept: `limit` answers are documented at it).
    static let maxChoiceBytes = 1_000_000
    /// Whether the node said that privacy choices have no effect on it (no CURVE keys, no WebSocket tokens).
    var warnedOfPrivacyWithoutViewers = false
    /// When the held changes are applied with this node's proposed time if no stamp has come.
    var holdUntil: BrokerTime?
    /// How long a node holds a loss's ends for its stamp. One etcd round trip is milliseconds; the wait runs out
    /// only when this node cannot write to etcd or read it back (then it is not live anyway).
    var lossStampWaitMilliseconds: Int64 = 1_000

    /// A privacy edit whose reply waits for its write (`key`, `value`) to come back from etcd.
    struct AwaitedEdit {
        let ticket: UInt64
        let key: ClusterKeys.PrivacyKey
        let value: String
        let reply: Result<Reply, PresenceError>
        let since: BrokerTime
    }

    /// Takes the awaited edits that `matches`, oldest first.
    mutating func takeAwaitedEdits(where matches: (AwaitedEdit) -> Bool) -> [AwaitedEdit] {
        guard !awaitedEdits.isEmpty else { return [] }
        let taken = awaitedEdits.filter(matches)
        if !taken.isEmpty { awaitedEdits.removeAll(where: matches) }
        return taken
    }

    init(nodeID: String, presence: PresenceCore.Configuration) {
        self.nodeID = nodeID
        var view = PresenceCore(configuration: presence)
        view.tracksChanges = false
        self.view = view
    }

    /// Where the node stands, as `ping` and the broker heartbeat say it.
    var standing: ClusterStanding {
        ClusterStanding(node: nodeID, state: .init(state, acceptsSessions: acceptsSessions))
    }

    /// The `seq` of a change at `revision`: the same on every node (``ClusterReplica/seq(at:)``).
    func seq(at revision: Int64) -> UInt64 {
        // The replica takes no base above 2^60, so this cannot overflow; saturate anyway rather than trap.
        let (sum, overflow) = (seqBase ?? 0).addingReportingOverflow(UInt64(max(0, revision)))
        return overflow ? .max : sum
    }

    /// The place of the change being applied among its revision's changes (``BrokerMachine/applyHeldChanges(now:)``):
    /// with the revision, it names the change's transitions in the presence log.
    var ordinal = 0

    /// Offsets through the last revision applied whole: the node's log holds every transition up to here
    /// (``BrokerMachine/logPosition``), and a cursor from any node up to here continues on this one.
    var logThrough: UInt64 = 0
    /// The end of the revision of the node's latest snapshot of etcd (0 before any): its log has a hole up to it, and
    /// records up to it are published without an offset, which would be no cursor (docs/history.md).
    var floorThrough: UInt64 = 0

    /// How a change is stamped: at `time`, with the `seq` and the log offset its revision and ``ordinal`` give.
    func stamp(time: BrokerTime, revision: Int64) -> PresenceCore.Stamp {
        PresenceCore.Stamp(
            time: time, seq: seq(at: revision), offset: Self.logOffset(revision: revision, ordinal: ordinal),
            revisionOffsets: Self.logOffsets(of: revision))
    }

    /// The offsets of every place of `revision`.
    static func logOffsets(of revision: Int64) -> ClosedRange<UInt64> {
        logOffset(revision: revision, ordinal: 0)...logOffset(revision: revision, ordinal: .max)
    }

    /// The bits of a cluster's log offset that number the changes of one revision (docs/history.md).
    static let ordinalBits = 20
    /// The highest revision an offset tells apart: SQLite's integers are signed, so offsets stay below 2^63.
    static let maxRevision: Int64 = 1 << (63 - ordinalBits) - 1

    /// The log offset of the `ordinal`th change of `revision`: the same on every node, which sees the same changes in
    /// the same order, so that a client moving to another node continues from the offset it has. A revision past
    /// 2^43 (278 years at 1,000 revisions a second) or a change past the 2^20th of one revision saturates.
    static func logOffset(revision: Int64, ordinal: Int) -> UInt64 {
        let revision = UInt64(max(0, min(revision, maxRevision)))
        return revision << ordinalBits | UInt64(max(0, min(ordinal, 1 << ordinalBits - 1)))
    }

    /// The log's epoch on a cluster: named by the cluster's `seq` base, which the cluster's first join wrote (a new
    /// cluster, or the cluster's keys wiped, makes a new one), so the same on every node.
    static func logEpoch(seqBase: UInt64) -> String {
        let digits = String(seqBase, radix: 16)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }

    /// The lost incarnations whose sessions `revision` (one revision's changes) ends with no stamp known (sessions
    /// the view has). Stamps among the changes `after` it are learned first: a stamp comes after the loss it stamps.
    mutating func unstampedLosses(
        _ revision: ArraySlice<ClusterReplica.Change>, before after: ArraySlice<ClusterReplica.Change>
    ) -> Set<ClusterKeys.Incarnation> {
        func unstamped() -> Set<ClusterKeys.Incarnation> {
            var found: Set<ClusterKeys.Incarnation> = []
            for case .sessionEnded(let key, .nodeLost, _) in revision
            where lossStamps[key.incarnation] == nil && view.user(ofAnySession: SessionID(key.description)) != nil {
                found.insert(key.incarnation)
            }
            return found
        }
        guard !unstamped().isEmpty else { return [] }
        for changes in [revision, after] {
            for case .lossStamped(let incarnation, let value, _) in changes {
                if let ending = ClusterValues.decodeEnding(value) { lossStamps[incarnation] = ending.time }
            }
        }
        return unstamped()
    }

    /// The number that names a new session of this node in etcd.
    mutating func number(for session: SessionID) -> UInt64 {
        lastNumber += 1
        numbers[session] = lastNumber
        return lastNumber
    }
}

extension BrokerMachine {
    /// Why a request cannot be served now because the node cannot vouch for the cluster's state; `nil` if it can
    /// (and on a single broker).
    var clusterRefusal: PresenceError? {
        guard case .cluster(let side) = publishing, !side.acceptsSessions else { return nil }
        return PresenceError(
            .clusterUnavailable,
            "node \(side.nodeID) cannot reach the cluster's store (etcd) now (\(side.standing.state.rawValue)): "
                + "try another node, or again later")
    }

    /// What the cluster node reported since the last round, in order, with what its threads say now (whether it
    /// may take sessions, the cluster's seq base): a change of its standing as clients see it is logged and
    /// publishes the broker heartbeat at once, so that subscribers learn it; the cluster's changes go to the view
    /// (``applyClusterChanges(_:now:)``); a write etcd refused for good is logged and undone
    /// (``clusterWriteFailed(_:now:)``).
    mutating func clusterReported(
        _ notifications: [ClusterNode.Notification], acceptsSessions: Bool, seqBase: UInt64?, now: BrokerTime
    ) {
        clusterNodeReads(acceptsSessions: acceptsSessions, seqBase: seqBase)
        for notification in notifications {
            switch notification {
            case .state(let state):
                if state.isLive { publishReplayedRecords(now: now) }
                guard clusterStateChanged(to: state, now: now), case .cluster(let side) = publishing else { continue }
                effects.append(
                    .notice("cluster node \(side.standing.state.rawValue)", ["node": side.nodeID, "state": "\(state)"]))
                effects.append(.publishHeartbeat)
            case .changes(let changes):
                publishReplayedRecords(now: now)
                applyClusterChanges(changes, now: now)
            case .snapshot(let revision, let changes):
                publishReplayedRecords(now: now)
                snapshotLoaded(at: revision)
                applyClusterChanges(changes, now: now)
            case .replayed(let changes):
                withCluster { $0.replaying = true }
                let first = effects.count
                applyClusterChanges(changes, now: now)
                setReplayedRecordsAside(since: first)
            case .writeFailed(let write, let reason):
                effects.append(.warning("a write to etcd was dropped", ["write": "\(write)", "reason": reason]))
                clusterWriteFailed(write, now: now)
            }
        }
    }

    /// What the node's threads say now: whether it may take sessions, and the cluster's seq base. Read by the loop
    /// before each round's requests.
    mutating func clusterNodeReads(acceptsSessions: Bool, seqBase: UInt64?) {
        withCluster { side in
            side.acceptsSessions = acceptsSessions
            side.seqBase = seqBase
        }
        // The log is kept under the cluster's epoch from the join on (before any change of it is applied), and again
        // after the writer started it over under one of its own (docs/history.md, "On a cluster").
        guard let seqBase, published.logsTransitions else { return }
        let epoch = ClusterSide.logEpoch(seqBase: seqBase)
        guard logEpoch != epoch else { return }
        logEpoch = epoch
        logControl.start = LogStart(epoch: epoch, floor: logPosition)
    }

    /// The node loaded a snapshot of etcd at `revision` rather than replaying its history: its log has a hole below
    /// it, and the snapshot's own changes (at `revision`) are this node's alone, numbered apart from the other
    /// nodes' changes of that revision. Cursors through `revision` are refused; the entries before it go, but each
    /// user's latest; `ping` reports the end of `revision`, from which a client continues; and records up to it are
    /// published without an offset (no cursor: ``takeEffects(into:logged:monotonic:)``).
    mutating func snapshotLoaded(at revision: Int64) {
        guard case .cluster = publishing, published.logsTransitions else { return }
        let places = ClusterSide.logOffsets(of: revision)
        let floor = LogFloor(through: places.upperBound, keepFrom: places.lowerBound)
        logControl.floor = floor.raised(to: logControl.floor)
        withCluster { side in
            side.floorThrough = max(side.floorThrough, floor.through)
            side.logThrough = max(side.logThrough, floor.through)
        }
    }

    /// Publications of records at or below the latest snapshot's revision carry no offset: a client holding part of
    /// a snapshot's records has no cursor another node could continue, and keeps the one it had.
    mutating func hideOffsetsBelowFloor() {
        guard !effects.isEmpty, let through = withCluster({ $0.floorThrough }), through > 0 else { return }
        for index in effects.indices {
            switch effects[index] {
            case .publish(var record) where record.offset.map({ $0 <= through }) == true:
                record.offset = nil
                effects[index] = .publish(record)
            case .publishViews(var record) where record.offset.map({ $0 <= through }) == true:
                record.offset = nil
                effects[index] = .publishViews(record)
            default:
                break
            }
        }
    }

    /// The node's state changed; whether its standing, as clients see it, changed (the loop then sends the broker
    /// heartbeat at once, so that subscribers learn it).
    mutating func clusterStateChanged(to state: NodeMembership.State, now: BrokerTime) -> Bool {
        let (changed, rejoined) =
            withCluster { side in
                let before = side.standing.state
                side.state = state
                var rejoined = false
                if case .live(let lease) = state {
                    rejoined = side.lease.map { $0 != lease } ?? false
                    side.lease = lease
                }
                return (side.standing.state != before, rejoined)
            } ?? (false, false)
        if rejoined { endAbandonedSessions(now: now) }
        if !state.isLive {
            answerAwaitedEdits(
                where: { _ in true },
                with: PresenceError(
                    .clusterUnavailable,
                    "this node lost the cluster's store (etcd) before the edit came back from it: it may still take "
                        + "effect when the node joins again; send it again (here later, or to another node)"))
        }
        return changed
    }

    /// Applies the cluster's changes, in etcd's order, to the view and publishes what they change. A node writes a
    /// session's end and its user's key in one transaction: the user's keys of a revision are read before its
    /// sessions, so that the end takes the reason and the time its node wrote.
    ///
    /// A revision that ends sessions of a lost incarnation waits for the loss's stamp in etcd, and so do the changes
    /// after it (so that every user's changes stay in order): ``applyHeldChanges(now:)``.
    mutating func applyClusterChanges(_ changes: [ClusterReplica.Change], now: BrokerTime) {
        guard !changes.isEmpty else { return }
        withCluster { side in
            if side.held.isEmpty { side.held = changes } else { side.held += changes }
        }
        applyHeldChanges(now: now)
    }

    /// Applies the held changes, one revision at a time, up to the first that ends a lost incarnation's sessions
    /// with no stamp known. For that one it asks etcd, once, to stamp the loss with this node's time unless a node
    /// did before (``ClusterNode/Write/stampLoss(_:ending:)``), and holds it and everything after it until the
    /// stamp comes back through the watch. If none has come by ``ClusterSide/lossStampWaitMilliseconds`` (this
    /// node cannot reach etcd), it ends them at the time it proposed, so that nobody stays online for ever.
    mutating func applyHeldChanges(now: BrokerTime) {
        guard
            let pending = withCluster({ side in
                defer { side.held = [] }
                return side.held
            }), !pending.isEmpty
        else { return }
        var start = pending.startIndex
        while start < pending.endIndex {
            let revision = pending[start].revision
            var end = start
            while end < pending.endIndex, pending[end].revision == revision { end += 1 }
            let unstamped = withCluster { $0.unstampedLosses(pending[start..<end], before: pending[end...]) } ?? []
            if !unstamped.isEmpty {
                if withCluster({ $0.holdUntil }) ?? nil == nil { askForStamps(unstamped, now: now) }
                if let until = withCluster({ $0.holdUntil }) ?? nil, now < until {
                    withCluster { $0.held = Array(pending[start...]) }
                    return
                }
                effects.append(
                    .warning(
                        "no stamp of a lost node's end came from etcd in time; its sessions end at this node's time",
                        ["incarnations": unstamped.map(\.description).sorted().joined(separator: ",")]))
                withCluster { side in
                    for incarnation in unstamped { side.lossStamps[incarnation] = side.proposedStamps[incarnation] }
                }
            }
            withCluster { $0.holdUntil = nil }
            for case .userPut(let user, let value, _) in pending[start..<end] {
                withCluster { $0.endings[user] = ClusterValues.decodeEnding(value) }
            }
            let first = effects.count
            for (ordinal, change) in pending[start..<end].enumerated() {
                withCluster { $0.ordinal = ordinal }
                apply(change, now: now)
            }
            keepLastRecords(since: first)
            withCluster { side in
                side.logThrough = max(side.logThrough, ClusterSide.logOffsets(of: revision).upperBound)
            }
            start = end
        }
    }

    /// Of the records one revision publishes, keeps each user's last: a revision that changes a user twice (a node's
    /// transaction with two of the user's sessions, or a snapshot's load: a session under a rejoined node's new key
    /// and the end of its old one) shows one record, at the revision's seq (PresenceCore keeps it for the second
    /// change), and no state between the two that etcd never held. Every node, watching or loading, then gives one
    /// seq one record (issue #21, found by the fault run: docs/cluster.md).
    private mutating func keepLastRecords(since first: Int) {
        guard effects.count - first > 1 else { return }
        func user(_ effect: Effect) -> UserID? {
            switch effect {
            case .publish(let record), .publishViews(let record): record.user
            default: nil
            }
        }
        var last: [UserID: Int] = [:]
        for index in first..<effects.count { if let user = user(effects[index]) { last[user] = index } }
        guard last.count < effects[first...].count(where: { user($0) != nil }) else { return }
        var kept = Array(effects[..<first])
        for index in first..<effects.count where user(effects[index]).map({ last[$0] == index }) ?? true {
            kept.append(effects[index])
        }
        // A user's last record keeps the offset of the user's first change: the records go out in offset order, so
        // that a client's highest offset leaves nothing of the revision behind it.
        let places = kept.indices.dropFirst(first).filter { user(kept[$0]) != nil }
        let ordered = places.map { kept[$0] }.sorted { Self.logOrder($0) < Self.logOrder($1) }
        for (place, effect) in zip(places, ordered) { kept[place] = effect }
        effects = kept
    }

    /// Where a publication falls in the log: its record's seq, then its offset.
    static func logOrder(_ effect: Effect) -> (UInt64, UInt64) {
        switch effect {
        case .publish(let record), .publishViews(let record): (record.seq, record.offset ?? 0)
        default: (0, 0)
        }
    }

    /// Takes the records among the effects from `first` on out, keeping each user's last aside: a join's replay of
    /// etcd's history (``ClusterNode/Notification/replayed(_:)``) publishes each user's record as the replay leaves
    /// it, once, not every record the history went through (subscribers of a node that starts or joins again would
    /// see old records go by, below the `seq`s they already have).
    private mutating func setReplayedRecordsAside(since first: Int) {
        guard effects.count > first else { return }
        var kept = Array(effects[..<first])
        for effect in effects[first...] {
            switch effect {
            case .publish(let record), .publishViews(let record):
                withCluster { $0.replayedRecords[record.user] = effect }
            case .resendViews(let before):
                // The views before the replay's first change of the user's privacy: the loop resends what differs
                // from them once the replay is over.
                withCluster { side in
                    if side.replayedViews[before.user] == nil { side.replayedViews[before.user] = before }
                }
            default:
                kept.append(effect)
            }
        }
        effects = kept
    }

    /// Publishes the records a replay set aside, in `seq` order, then the records of users who got a new
    /// subscriber during the replay and had none set aside: when the node is live, or when changes that are not a
    /// replay come (the replay gave up for a snapshot).
    private mutating func publishReplayedRecords(now: BrokerTime) {
        guard
            let (records, views, awaiting) = withCluster({ side in
                defer {
                    side.replaying = false
                    side.replayedRecords = [:]
                    side.replayedViews = [:]
                    side.awaitingReplay = []
                }
                return (side.replayedRecords, side.replayedViews, side.awaitingReplay)
            })
        else { return }
        effects += records.values.sorted { Self.logOrder($0) < Self.logOrder($1) }
        effects += views.keys.sorted().map { Effect.resendViews(views[$0]!) }
        for user in awaiting.sorted() where records[user] == nil {
            replay(.presence(user), now: now)
        }
    }

    /// Asks etcd to stamp these losses with this node's time (the first node's stamp wins) and starts the wait.
    private mutating func askForStamps(_ incarnations: Set<ClusterKeys.Incarnation>, now: BrokerTime) {
        let asked: Set<ClusterKeys.Incarnation> =
            withCluster { side in
                side.holdUntil = now + side.lossStampWaitMilliseconds
                let new = incarnations.filter { side.proposedStamps[$0] == nil }
                for incarnation in new { side.proposedStamps[incarnation] = now }
                return new
            } ?? []
        let ending = ClusterValues.encode(ClusterValues.Ending(reason: .nodeLost, time: now))
        for incarnation in asked.sorted(by: { $0.description < $1.description }) {
            effects.append(.clusterWrite(.stampLoss(incarnation, ending: ending)))
        }
    }

    private mutating func apply(_ change: ClusterReplica.Change, now: BrokerTime) {
        // Read through ``withCluster(_:)``, in place: a copy of the side held while ``withPublished(_:)`` changes the
        // view would make that change copy the whole view.
        switch change {
        case .sessionPut(let key, let value, _):
            guard let (session, time) = ClusterValues.decodeSession(value) else {
                effects.append(.warning("a session in etcd cannot be read; left out", ["key": "\(key)"]))
                return
            }
            guard let stamp = withCluster({ $0.stamp(time: time, revision: change.revision) }) else { return }
            let actions = withPublished {
                $0.putRemoteSession(SessionID(key.description), session, stamp: stamp, now: now)
            }
            publish(actions, now: now)
        case .sessionEnded(let key, let end, _):
            let id = SessionID(key.description)
            let found: ClusterValues.Ending?? = withCluster { side in
                guard let user = side.view.user(ofAnySession: id) else { return nil }
                // A lost node wrote nothing: its sessions end at the loss's stamp in etcd, the same on every node
                // (this node's proposed time only if none came in time).
                let lost = side.lossStamps[key.incarnation] ?? side.proposedStamps[key.incarnation] ?? now
                return end == .nodeLost
                    ? ClusterValues.Ending(reason: .nodeLost, time: lost)
                    : side.endings[user.rawValue] ?? ClusterValues.Ending(reason: .bye, time: now)
            }
            guard let ending = found ?? nil else { return }
            guard let stamp = withCluster({ $0.stamp(time: ending.time, revision: change.revision) }) else { return }
            let actions = withPublished { $0.endRemoteSession(id, reason: ending.reason, stamp: stamp, now: now) }
            publish(actions, now: now)
        case .userPut:
            break  // read with its revision, above
        case .userDeleted(let user, _):
            withCluster { $0.endings[user] = nil }
        case .groupPut(let group, let value, _):
            guard let id = GroupID(validating: group), let members = ClusterValues.decodeMembers(value) else {
                effects.append(.warning("a group in etcd cannot be read; left out", ["group": "\(group)"]))
                return
            }
            // The whole definition replaces the group: a no-op on the node that made the change, which applied it
            // when it answered.
            let result = withPublished { $0.group(id, GroupEdit(members: members), limit: 1, now: now) }
            if case .failure(let error) = result {
                // This node's limits refuse what another node (or an operator) wrote: the nodes now differ on it.
                effects.append(
                    .warning(
                        "a group in etcd is refused by this node's limits; this node leaves it as it was",
                        ["group": "\(group)", "error": "\(error.code.rawValue): \(error.message)"]))
            }
        case .groupDeleted(let group, _):
            guard let id = GroupID(validating: group) else { return }
            let actions = withPublished { $0.ungroup(id, now: now).actions }
            publish(actions, now: now)
        case .privacyPut(let key, let value, let revision):
            applyClusterChoice(key, value: value, revision: revision, now: now)
        case .privacyDeleted(let key, let revision):
            applyClusterChoice(key, value: nil, revision: revision, now: now)
        case .lossStamped(let incarnation, let value, _):
            // Usually read before the loss it stamps, above; this keeps one that came after this node gave up waiting.
            if let ending = ClusterValues.decodeEnding(value) {
                withCluster { $0.lossStamps[incarnation] = ending.time }
            }
        case .lossStampDeleted(let incarnation, _):
            withCluster { side in
                side.lossStamps[incarnation] = nil
                side.proposedStamps[incarnation] = nil
            }
        case .incarnationStarted(let incarnation, _, _):
            effects.append(.notice("cluster node joined", ["incarnation": "\(incarnation)"]))
        case .incarnationEnded(let incarnation, _):
            effects.append(.notice("cluster node left", ["incarnation": "\(incarnation)"]))
        }
    }

    /// etcd refused a write for good, for another reason than the node's lease (a lease found gone is not a
    /// refusal: the node joins again and writes its sessions under the new one). A session whose put was refused
    /// would live on this node and nowhere else, with a change this node acknowledged and the cluster never saw: it
    /// ends here too, as `node_lost` (its end is written, and its client learns it from `unknown_session` on its next
    /// request, then says hello again, here or on another node).
    mutating func clusterWriteFailed(_ write: ClusterNode.Write, now: BrokerTime) {
        if case .putPrivacy(let key, let value) = write {
            // The next edit starts from what etcd holds again.
            withCluster { side in
                if side.writtenPrivacy[key] == value { side.writtenPrivacy[key] = nil }
            }
            answerAwaitedEdits(
                where: { $0.key == key && $0.value == value },
                with: PresenceError(.clusterUnavailable, "etcd refused the edit; nothing changed"))
            return
        }
        guard case .putSession(let number, _, _) = write,
            let found = withCluster({ side in side.numbers.first { String($0.value) == number }?.key }),
            let session = found
        else { return }
        // A node's core publishes nothing: the end goes to etcd and is published when it comes back.
        _ = core.end(session: session, reason: .nodeLost, now: now)
        effects.append(.warning("a session ended: etcd refused its change", ["session": "\(number)"]))
        noteSessionEvents(now: now)
    }

    /// A `heartbeat` or `status` refused because the node cannot vouch for the cluster now: its client was told
    /// `cluster_unavailable` and moves to another node, where it says hello again. If the node's lease runs out
    /// before its client comes back, the session must not come back with the node: the node asks not to write it
    /// again at its next join (``ClusterNode/Write/abandonIfRejoined(id:)``), and ends it when it has joined
    /// (``clusterStateChanged(to:now:)``). If the lease lives and the client comes back, nothing changes
    /// (``noteRenewal(of:)``). Ending it at once would be wrong: every node of a cluster refuses during an etcd outage
    /// longer than its window, and etcd keeps leases over an outage, so every session would end for nothing.
    mutating func noteRefusal(of request: Request) {
        guard let session = request.sessionNamed, core.user(ofAnySession: session) != nil else { return }
        let number: UInt64? =
            withCluster { side in
                guard side.refused.insert(session).inserted else { return nil }
                return side.numbers[session]
            } ?? nil
        if let number { effects.append(.clusterWrite(.abandonIfRejoined(id: String(number)))) }
    }

    /// A session's client came back while the lease lived: the session is no longer abandoned.
    mutating func noteRenewal(of request: Request) {
        guard case .cluster(let side) = publishing, !side.refused.isEmpty, let session = request.sessionNamed else {
            return
        }
        withCluster { _ = $0.refused.remove(session) }
    }

    /// After a join under a new lease: the sessions whose clients were refused meanwhile, and did not come back, end
    /// here as they ended everywhere else with the old lease (`node_lost`); a client that comes back to one gets
    /// `unknown_session` and says hello again. Their ends are written too, in case the join wrote one again.
    private mutating func endAbandonedSessions(now: BrokerTime) {
        let abandoned: Set<SessionID> =
            withCluster { side in
                defer { side.refused = [] }
                return side.refused
            } ?? []
        guard !abandoned.isEmpty else { return }
        for session in abandoned.sorted(by: { $0.rawValue < $1.rawValue }) {
            _ = core.end(session: session, reason: .nodeLost, now: now)
        }
        noteSessionEvents(now: now)
        effects.append(
            .notice(
                "sessions refused while the lease ran out ended after the join",
                ["sessions": "\(abandoned.count)"]))
    }

    /// Writes to etcd what this node's sessions did: a session opened or changed is put (under the node's lease),
    /// one that ended is deleted with its user's key saying why.
    mutating func writeSessionEvents(_ events: [PresenceCore.SessionEvent], now: BrokerTime) {
        for event in events {
            switch event {
            case .opened(let id, _, _), .changed(let id, _):
                // A session that ended in the same round is not written at all.
                guard let session = core.description(of: id) else { continue }
                guard let number = withCluster({ $0.numbers[id] ?? $0.number(for: id) }) else { return }
                effects.append(
                    .clusterWrite(
                        .putSession(id: String(number), value: ClusterValues.encode(session, at: now), user: nil)))
            case .ended(let id, let user, let reason):
                guard let number = withCluster({ $0.numbers.removeValue(forKey: id) }) ?? nil else { continue }
                let ending = ClusterValues.encode(ClusterValues.Ending(reason: reason, time: now))
                effects.append(.clusterWrite(.endSession(id: String(number), user: (user.rawValue, ending))))
            case .moved, .detached:
                continue
            }
        }
    }
}

extension ClusterStanding.State {
    /// What a node's membership means to clients: a node that is live but outside its window (no renewal answered
    /// for two thirds of its lease) is already cut off for them.
    init(_ state: NodeMembership.State, acceptsSessions: Bool) {
        switch state {
        case .joining: self = .joining
        case .live: self = acceptsSessions ? .live : .cutOff
        case .cutOff: self = .cutOff
        case .stopped: self = .stopped
        }
    }
}

extension Request {
    /// The session a `heartbeat` or a `status` names; `nil` for any other request.
    var sessionNamed: SessionID? {
        switch self {
        case .heartbeat(let id), .status(let id, _, _, _): id
        default: nil
        }
    }
}
