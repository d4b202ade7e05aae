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
    /// The last value of each user's key: why and when their latest session ended, as its node wrote it.
    var endings: [String: ClusterValues.Ending] = [:]

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

    /// What the node's threads say now: whether it may take sessions, and the cluster's seq base. Read by the loop
    /// before each round's requests.
    mutating func clusterNodeReads(acceptsSessions: Bool, seqBase: UInt64?) {
        withCluster { side in
            side.acceptsSessions = acceptsSessions
            side.seqBase = seqBase
        }
    }

    /// The node's state changed; whether its standing, as clients see it, changed (the loop then sends the broker
    /// heartbeat at once, so that subscribers learn it).
    mutating func clusterStateChanged(to state: NodeMembership.State) -> Bool {
        withCluster { side in
            let before = side.standing.state
            side.state = state
            guard side.standing.state != before else { return false }
            return true
        } ?? false
    }

    /// Applies the cluster's changes, in etcd's order, to the view and publishes what they change. A node writes a
    /// session's end and its user's key in one transaction: the user's keys of a revision are read before its
    /// sessions, so that the end takes the reason and the time its node wrote.
    mutating func applyClusterChanges(_ changes: [ClusterReplica.Change], now: BrokerTime) {
        var start = changes.startIndex
        while start < changes.endIndex {
            let revision = changes[start].revision
            var end = start
            while end < changes.endIndex, changes[end].revision == revision { end += 1 }
            for case .userPut(let user, let value, _) in changes[start..<end] {
                withCluster { $0.endings[user] = ClusterValues.decodeEnding(value) }
            }
            for change in changes[start..<end] { apply(change, now: now) }
            start = end
        }
    }

    private mutating func apply(_ change: ClusterReplica.Change, now: BrokerTime) {
        guard case .cluster(let side) = publishing else { return }
        let seq = side.seq(at: change.revision)
        switch change {
        case .sessionPut(let key, let value, _):
            guard let (session, time) = ClusterValues.decodeSession(value) else {
                effects.append(.warning("a session in etcd cannot be read; left out", ["key": "\(key)"]))
                return
            }
            let stamp = PresenceCore.Stamp(time: time, seq: seq)
            let actions = withPublished {
                $0.putRemoteSession(SessionID(key.description), session, stamp: stamp, now: now)
            }
            publish(actions, now: now)
        case .sessionEnded(let key, let end, _):
            let id = SessionID(key.description)
            guard let user = side.view.user(ofAnySession: id) else { return }
            // A lost node wrote nothing: its sessions end now, by this node's clock.
            let ending =
                end == .nodeLost
                ? ClusterValues.Ending(reason: .nodeLost, time: now)
                : side.endings[user.rawValue] ?? ClusterValues.Ending(reason: .bye, time: now)
            let stamp = PresenceCore.Stamp(time: ending.time, seq: seq)
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
        case .lossStamped, .lossStampDeleted:
            break  // not used yet: every node stamps a loss with its own time
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
        guard case .putSession(let number, _, _) = write,
            let found = withCluster({ side in side.numbers.first { String($0.value) == number }?.key }),
            let session = found
        else { return }
        // A node's core publishes nothing: the end goes to etcd and is published when it comes back.
        _ = core.end(session: session, reason: .nodeLost, now: now)
        effects.append(.warning("a session ended: etcd refused its change", ["session": "\(number)"]))
        noteSessionEvents(now: now)
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
