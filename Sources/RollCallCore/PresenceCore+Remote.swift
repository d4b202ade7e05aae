/// Sessions of the cluster's store (docs/cluster.md): in a cluster, every node builds the records it publishes from
/// the store's history alone, its own sessions included as they come back from the store, so that every node makes
/// the same records with the same `seq` from the same changes in the same order.
///
/// A remote session has no connection and no TTL here: the node that holds it tracks its liveness and writes its
/// changes and its end to the store, and a node that is lost has its sessions ended by the store (its lease).
extension PresenceCore {
    /// What others may know of a session: what a node writes to the cluster's store.
    public struct SessionDescription: Sendable, Equatable {
        public var user: UserID
        public var device: String?
        public var status: Status
        public var text: String?

        public init(user: UserID, device: String? = nil, status: Status, text: String? = nil) {
            self.user = user
            self.device = device
            self.status = status
            self.text = text
        }
    }

    /// When a change of the cluster's store happened, as every node sees it: the time the node that made it gave
    /// it (a record's `since` and `last_seen`), the `seq` its revision gives (a record's `seq`, at least), and, with
    /// the presence log on, the offset its place in etcd's history gives (the same on every node: docs/history.md),
    /// among the offsets of its revision's places.
    public struct Stamp: Sendable, Equatable {
        public var time: BrokerTime
        public var seq: UInt64
        public var offset: UInt64?
        /// The offsets of every place of the change's revision: a user whose latest entry is among them was changed
        /// earlier in the same revision, and keeps that entry (one revision, one record per user).
        public var revisionOffsets: ClosedRange<UInt64>?

        public init(
            time: BrokerTime, seq: UInt64, offset: UInt64? = nil, revisionOffsets: ClosedRange<UInt64>? = nil
        ) {
            self.time = time
            self.seq = seq
            self.offset = offset
            self.revisionOffsets = revisionOffsets
        }
    }

    /// Remote sessions held now.
    public var remoteSessionCount: Int { remoteSessions }

    /// The user of session `id`, whoever holds it (remote sessions included), or `nil` if it is not live.
    public func user(ofAnySession id: SessionID) -> UserID? { sessions[id]?.user }

    /// A session of the store was created or changed. Returns the record to publish if the user's changed. A session
    /// id already held by one of this broker's own clients is left alone (ids of the store are its keys, which no
    /// hello makes).
    public mutating func putRemoteSession(
        _ id: SessionID, _ description: SessionDescription, stamp: Stamp, now: BrokerTime
    ) -> [Action] {
        var description = description
        if description.text?.isEmpty == true { description.text = nil }  // as a local session keeps it
        if let session = sessions[id] {
            guard session.isRemote, session.user == description.user else { return [] }
            guard session.status != description.status || !sameBytes(session.text, description.text) else {
                sessions[id]!.device = description.device
                return []
            }
            statusChanges += 1
            if session.status == .invisible { invisibleSessionCount -= 1 }
            if description.status == .invisible { invisibleSessionCount += 1 }
            sessions[id]!.status = description.status
            sessions[id]!.text = description.text
            sessions[id]!.device = description.device
            sessions[id]!.statusOrder = statusChanges
            let reason: OfflineReason = description.status == .invisible ? .bye : .status
            return refresh(description.user, now: now, reason: reason, stamp: stamp).map(Action.publish)
        }
        statusChanges += 1
        sessions[id] = Session.remote(description, statusOrder: statusChanges, now: now)
        remoteSessions += 1
        if description.status == .invisible { invisibleSessionCount += 1 }
        users[description.user, default: User()].sessions.append(id)
        return refresh(description.user, now: now, reason: .status, stamp: stamp).map(Action.publish)
    }

    /// A session of the store ended, for `reason`. Returns the record to publish if the user's changed.
    public mutating func endRemoteSession(
        _ id: SessionID, reason: OfflineReason, stamp: Stamp, now: BrokerTime
    ) -> [Action] {
        guard let session = sessions[id], session.isRemote else { return [] }
        sessions[id] = nil
        remoteSessions -= 1
        sessionsEnded[reason, default: 0] += 1
        if session.status == .invisible { invisibleSessionCount -= 1 }
        users[session.user]?.sessions.removeAll { $0 == id }
        return refresh(session.user, now: now, reason: reason, stamp: stamp).map(Action.publish)
    }

    /// Every member of group `id`, in id order; `nil` for a group that does not exist. What a cluster node writes
    /// to the store as the group's definition.
    public func members(of id: GroupID) -> [UserID]? { groups[id]?.sorted }
}
