import Logging
import RollCallCore
import RollCallWire

/// The loop's side of the machine: carrying out its effects, and handing it what the cluster node reported.
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
                case .publishHeartbeat: enqueue(Topic.broker.bytes, .heartbeat)
                case .warning(let message, let metadata):
                    logger.warning("\(message)", metadata: metadata.mapValues { .string($0) })
                case .notice(let message, let metadata):
                    logger.notice("\(message)", metadata: metadata.mapValues { .string($0) })
                case .sessionSteps(let events): log(events)
                case .publishViews(let record): publishRestricted(record, replay: true)
                case .resendViews(let before): resendViews(since: before)
                }
            }
            carrying.removeAll(keepingCapacity: true)
        }
    }

    /// Hands the machine what the cluster node reported since the last round and what it says now.
    func takeClusterNotifications() {
        guard let cluster else { return }
        machine.clusterReported(
            cluster.inbox.take(), acceptsSessions: cluster.node.acceptsSessions, seqBase: cluster.node.seqBase,
            now: clock.now())
        carryOutEffects()
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
