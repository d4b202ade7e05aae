import Logging
import RollCallCluster
import RollCallCore
import RollCallWire

/// A node of a cluster (docs/cluster.md): this node's sessions go to etcd, and the records published come back
/// from it. The core keeps this node's sessions (requests, liveness, replies) and publishes nothing; the cluster's
/// view, fed only by etcd's history, publishes every record, this node's included, so that every node publishes the
/// same record with the same `seq`.
extension EventLoop {
    /// The core whose records are published and read: the cluster's view on a node of a cluster, else the core.
    var published: PresenceCore { cluster?.view ?? core }

    /// Carries out what the core asked for after one of this node's clients did something. On a node of a cluster
    /// nothing: the change goes to etcd (``writeSessionEvents(_:)``) and is published when it comes back.
    func performLocal(_ actions: [PresenceCore.Action], now: BrokerTime) {
        guard cluster == nil else { return }
        perform(actions, now: now)
    }

    /// Why a request cannot be served now because the node cannot vouch for the cluster's state; `nil` if it can.
    var clusterRefusal: PresenceError? {
        guard let cluster, !cluster.node.acceptsSessions else { return nil }
        return PresenceError(
            .clusterUnavailable,
            "node \(cluster.settings.nodeID) cannot reach the cluster's store (etcd) now (\(cluster.standing.state.rawValue)): "
                + "try another node, or again later")
    }

    /// Takes what the node reported since the last round: its state, and the cluster's changes in etcd's order.
    func takeClusterNotifications() {
        guard let cluster else { return }
        for notification in cluster.inbox.take() {
            switch notification {
            case .state(let state):
                let before = cluster.standing.state
                cluster.state = state
                if cluster.standing.state != before {
                    logger.notice(
                        "cluster node \(cluster.standing.state.rawValue)",
                        metadata: ["node": "\(cluster.settings.nodeID)", "state": "\(state)"])
                    enqueue(Topic.broker.bytes, .heartbeat)  // subscribers learn it at once
                }
            case .changes(let changes):
                apply(changes, cluster)
            case .writeFailed(let write, let reason):
                logger.warning("a write to etcd was dropped", metadata: ["write": "\(write)", "reason": "\(reason)"])
            }
        }
    }

    /// Applies changes to the view and publishes what they change. A node writes a session's end and its user's
    /// key in one transaction: the user's keys of a revision are read before its sessions, so that the end takes
    /// the reason and the time its node wrote.
    private func apply(_ changes: [ClusterReplica.Change], _ cluster: ClusterLink) {
        let now = clock.now()
        var start = changes.startIndex
        while start < changes.endIndex {
            let revision = changes[start].revision
            var end = start
            while end < changes.endIndex, changes[end].revision == revision { end += 1 }
            for case .userPut(let user, let value, _) in changes[start..<end] {
                cluster.endings[user] = ClusterValues.decodeEnding(value)
            }
            for change in changes[start..<end] { apply(change, cluster, now: now) }
            start = end
        }
    }

    private func apply(_ change: ClusterReplica.Change, _ cluster: ClusterLink, now: BrokerTime) {
        let seq = cluster.seq(at: change.revision)
        switch change {
        case .sessionPut(let key, let value, _):
            guard let (session, time) = ClusterValues.decodeSession(value) else {
                logger.warning("a session in etcd cannot be read; left out", metadata: ["key": "\(key)"])
                return
            }
            let stamp = PresenceCore.Stamp(time: time, seq: seq)
            perform(
                cluster.view.putRemoteSession(SessionID(key.description), session, stamp: stamp, now: now), now: now)
        case .sessionEnded(let key, let end, _):
            let id = SessionID(key.description)
            guard let user = cluster.view.user(ofAnySession: id) else { return }
            // A lost node wrote nothing: its sessions end now, by this node's clock.
            let ending =
                end == .nodeLost
                ? ClusterValues.Ending(reason: .nodeLost, time: now)
                : cluster.endings[user.rawValue] ?? ClusterValues.Ending(reason: .bye, time: now)
            let stamp = PresenceCore.Stamp(time: ending.time, seq: seq)
            perform(cluster.view.endRemoteSession(id, reason: ending.reason, stamp: stamp, now: now), now: now)
        case .userPut:
            break  // read with its revision, above
        case .userDeleted(let user, _):
            cluster.endings[user] = nil
        case .groupPut(let group, let value, _):
            guard let id = GroupID(validating: group), let members = ClusterValues.decodeMembers(value) else {
                logger.warning("a group in etcd cannot be read; left out", metadata: ["group": "\(group)"])
                return
            }
            // The whole definition replaces the group: a no-op on the node that made the change, which applied it
            // when it answered.
            if case .failure(let error) = cluster.view.group(id, GroupEdit(members: members), limit: 1, now: now) {
                // This node's limits refuse what another node (or an operator) wrote: the nodes now differ on it.
                logger.error(
                    "a group in etcd is refused by this node's limits; this node leaves it as it was",
                    metadata: ["group": "\(group)", "error": "\(error.code.rawValue): \(error.message)"])
            }
        case .groupDeleted(let group, _):
            guard let id = GroupID(validating: group) else { return }
            perform(cluster.view.ungroup(id, now: now).actions, now: now)
        case .incarnationStarted(let incarnation, _, _):
            logger.info("cluster node joined", metadata: ["incarnation": "\(incarnation)"])
        case .incarnationEnded(let incarnation, _):
            logger.info("cluster node left", metadata: ["incarnation": "\(incarnation)"])
        }
    }

    /// Writes to etcd what this node's sessions did: a session opened or changed is put (under the node's lease),
    /// one that ended is deleted with its user's key saying why.
    func writeSessionEvents(_ events: [PresenceCore.SessionEvent]) {
        guard let cluster else { return }
        let now = clock.now()
        for event in events {
            switch event {
            case .opened(let id, _, _), .changed(let id, _):
                // A session that ended in the same round is not written at all.
                guard let session = core.description(of: id) else { continue }
                let number = cluster.numbers[id] ?? cluster.number(for: id)
                cluster.node.write(
                    .putSession(id: String(number), value: ClusterValues.encode(session, at: now), user: nil))
            case .ended(let id, let user, let reason):
                guard let number = cluster.numbers.removeValue(forKey: id) else { continue }
                let ending = ClusterValues.encode(ClusterValues.Ending(reason: reason, time: now))
                cluster.node.write(.endSession(id: String(number), user: (user.rawValue, ending)))
            case .moved, .detached:
                continue
            }
        }
    }

    /// `group` on a node of a cluster: a read answers from the view; an edit is applied to the view for the reply,
    /// and its whole definition written to etcd, from where every other node applies it.
    func editGroupInCluster(
        _ group: GroupID, _ edit: GroupEdit, after: UserID?, limit: Int, now: BrokerTime
    ) -> Result<GroupSnapshot, PresenceError> {
        guard let cluster else { return .failure(PresenceError(.badRequest, "not a cluster")) }
        // Reading too: a node cut off from the cluster cannot vouch for a group's counts.
        if let refusal = clusterRefusal { return .failure(refusal) }
        if edit.isReadOnly { return cluster.view.group(group, edit, after: after, limit: limit, now: now) }
        let result = cluster.view.group(group, edit, after: after, limit: limit, now: now)
        if case .success = result, let members = cluster.view.members(of: group) {
            cluster.node.write(.putGroup(id: group.rawValue, definition: ClusterValues.encode(members: members)))
        }
        return result
    }

    /// `ungroup` on a node of a cluster: deleted from the view for the reply and the deletion message, and in etcd.
    func ungroupInCluster(_ group: GroupID, now: BrokerTime) -> Outcome<Bool> {
        guard let cluster else { return core.ungroup(group, now: now) }
        let outcome = cluster.view.ungroup(group, now: now)
        if case .success(true) = outcome.reply { cluster.node.write(.deleteGroup(id: group.rawValue)) }
        return outcome
    }
}

extension ClusterStanding.State {
    /// What a node's membership means to clients: a node that is live but has not heard from etcd for two thirds of
    /// its lease is already cut off for them.
    init(_ state: NodeMembership.State, acceptsSessions: Bool) {
        switch state {
        case .joining: self = .joining
        case .live: self = acceptsSessions ? .live : .cutOff
        case .cutOff: self = .cutOff
        case .stopped: self = .stopped
        }
    }
}
