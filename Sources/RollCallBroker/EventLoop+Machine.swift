import Logging
import RollCallCore
import RollCallWire

/// The loop's side of the machine: carrying out its effects, and feeding it what the cluster node reported.
extension EventLoop {
    /// Carries out the machine's effects in order, and those that carrying them out adds (a WebSocket subscriber
    /// too slow for a publication is dropped at the start of the next round, not in the middle of this one).
    func carryOutEffects() {
        guard !isCarrying else { return }  // the outer call takes what is added meanwhile
        isCarrying = true
        defer { isCarrying = false }
        // Consecutive group messages come from one output of a core and show the same records: each record is
        // encoded once for all of them.
        var recordCache: [UserID: [UInt8]] = [:]
        while !machine.effects.isEmpty {
            swap(&carrying, &machine.effects)
            for effect in carrying {
                if case .publishGroup = effect {} else if !recordCache.isEmpty { recordCache.removeAll() }
                switch effect {
                case .publish(let record): publish(record)
                case .publishGroup(let update, let now): publish(update, recordCache: &recordCache, now: now)
                case .clusterWrite(let write): cluster?.node.write(write)
                case .warning(let message, let metadata):
                    logger.warning("\(message)", metadata: metadata.mapValues { .string($0) })
                case .notice(let message, let metadata):
                    logger.info("\(message)", metadata: metadata.mapValues { .string($0) })
                case .sessionSteps(let events): log(events)
                case .publishViews(let record): publishRestricted(record, replay: true)
                case .resendViews(let before): resendViews(since: before)
                }
            }
            carrying.removeAll(keepingCapacity: true)
        }
    }

    /// Takes what the cluster node reported since the last round (its state, and the cluster's changes in etcd's
    /// order), and what it says now about taking sessions.
    func takeClusterNotifications() {
        guard let cluster else { return }
        for notification in cluster.inbox.take() {
            switch notification {
            case .state(let state):
                machine.clusterNodeReads(acceptsSessions: cluster.node.acceptsSessions, seqBase: cluster.node.seqBase)
                if machine.clusterStateChanged(to: state), let standing = machine.publishing.standing {
                    logger.notice(
                        "cluster node \(standing.state.rawValue)",
                        metadata: ["node": "\(cluster.settings.nodeID)", "state": "\(state)"])
                    enqueue(Topic.broker.bytes, .heartbeat)  // subscribers learn it at once
                }
            case .changes(let changes):
                machine.clusterNodeReads(acceptsSessions: cluster.node.acceptsSessions, seqBase: cluster.node.seqBase)
                machine.applyClusterChanges(changes, now: clock.now())
                carryOutEffects()
            case .writeFailed(let write, let reason):
                logger.warning("a write to etcd was dropped", metadata: ["write": "\(write)", "reason": "\(reason)"])
                machine.clusterWriteFailed(write, now: clock.now())
                carryOutEffects()
            }
        }
        machine.clusterNodeReads(acceptsSessions: cluster.node.acceptsSessions, seqBase: cluster.node.seqBase)
    }

    /// Logs sessions' steps at debug level.
    private func log(_ events: [PresenceCore.SessionEvent]) {
        for event in events {
            switch event {
            case .opened(let session, let user, let connection):
                logger.debug(
                    "session opened",
                    metadata: [
                        "session": "\(session)", "user": "\(user)",
                        "connection": "\(connection.map { "\($0)" } ?? "none")",
                    ])
            case .moved(let session, let user, let from, let to):
                logger.debug(
                    "session moved to a new connection",
                    metadata: [
                        "session": "\(session)", "user": "\(user)", "from": "\(from.map { "\($0)" } ?? "none")",
                        "to": "\(to)",
                    ])
            case .detached(let session, let user):
                logger.debug(
                    "session lost its connection; waiting out the grace period",
                    metadata: ["session": "\(session)", "user": "\(user)"])
            case .changed(let session, let user):
                logger.debug("session changed its status", metadata: ["session": "\(session)", "user": "\(user)"])
            case .ended(let session, let user, let reason):
                logger.debug(
                    "session ended", metadata: ["session": "\(session)", "user": "\(user)", "reason": "\(reason)"])
            }
        }
    }
}
