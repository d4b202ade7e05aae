/// A node's in-memory copy of everything under the cluster's prefix, built from a snapshot and kept by the watch:
/// pure (no etcd, no clock), so that every node, fed the same history, computes the same changes in the same order
/// with the same revisions.
///
/// It turns key changes into cluster changes: which incarnations of which nodes live, which sessions exist, the
/// users' records and the groups. The one inference it makes: a session whose incarnation key is deleted in the
/// same revision (etcd deletes every key of an expired or revoked lease at once), or that outlives its incarnation,
/// ended because its node was lost (``Change/SessionEnd/nodeLost``), not because its node ended it.
public struct ClusterReplica: Sendable, Equatable {
    /// One change, with the etcd revision it happened at (the same on every node).
    public enum Change: Sendable, Equatable {
        public enum SessionEnd: Sendable, Equatable {
            /// The session's node deleted it (bye, timeout, connection closed: the node wrote why, in the user's
            /// record).
            case ended
            /// The session's node was lost: its lease ended.
            case nodeLost
        }

        case incarnationStarted(ClusterKeys.Incarnation, value: String, revision: Int64)
        case incarnationEnded(ClusterKeys.Incarnation, revision: Int64)
        /// A session was created or changed.
        case sessionPut(ClusterKeys.SessionKey, value: String, revision: Int64)
        case sessionEnded(ClusterKeys.SessionKey, SessionEnd, revision: Int64)
        case userPut(String, value: String, revision: Int64)
        case userDeleted(String, revision: Int64)
        case groupPut(String, value: String, revision: Int64)
        case groupDeleted(String, revision: Int64)
        /// One of a user's privacy choices was written (``ClusterKeys/Entry/privacy(_:)``).
        case privacyPut(ClusterKeys.PrivacyKey, value: String, revision: Int64)
        /// One of a user's privacy choices was deleted (by hand: nodes write the defaults rather than delete).
        case privacyDeleted(ClusterKeys.PrivacyKey, revision: Int64)
        /// The time a lost incarnation's sessions ended, as the first node to see them go wrote it
        /// (``ClusterKeys/Entry/lost(_:)``).
        case lossStamped(ClusterKeys.Incarnation, value: String, revision: Int64)
        /// The stamp is gone (its writer's lease ended).
        case lossStampDeleted(ClusterKeys.Incarnation, revision: Int64)

        public var revision: Int64 {
            switch self {
            case .incarnationStarted(_, _, let revision), .incarnationEnded(_, let revision),
                .sessionPut(_, _, let revision), .sessionEnded(_, _, let revision), .userPut(_, _, let revision),
                .userDeleted(_, let revision), .groupPut(_, _, let revision), .groupDeleted(_, let revision),
                .privacyPut(_, _, let revision), .privacyDeleted(_, let revision),
                .lossStamped(_, _, let revision), .lossStampDeleted(_, let revision):
                revision
            }
        }
    }

    public let keys: ClusterKeys
    public private(set) var incarnations: [ClusterKeys.Incarnation: String] = [:]
    public private(set) var sessions: [ClusterKeys.SessionKey: String] = [:]
    public private(set) var users: [String: String] = [:]
    public private(set) var groups: [String: String] = [:]
    /// The users' privacy choices (``ClusterKeys/Entry/privacy(_:)``).
    public private(set) var privacy: [ClusterKeys.PrivacyKey: String] = [:]
    /// The stamps of lost incarnations' ends (``ClusterKeys/Entry/lost(_:)``).
    public private(set) var losses: [ClusterKeys.Incarnation: String] = [:]
    /// The revision the copy is at: everything up to it has been applied.
    public private(set) var revision: Int64 = 0
    /// The cluster's `seq` base (the `cluster` key), once a node has written it.
    public private(set) var seqBase: UInt64?

    /// The `seq` of a change at `revision`: the same on every node, growing with the revision, and above every
    /// `seq` a single-node broker issued before the cluster was made (the base is the time the first node joined,
    /// in milliseconds × 1000, the single-node broker's own rule). `nil` until the base is known.
    public func seq(at revision: Int64) -> UInt64? {
        seqBase.map { $0 + UInt64(max(0, revision)) }  // a base is at most ``maxSeqBase``: no overflow
    }

    /// The largest `cluster` value taken as a base: about 36,000 years of milliseconds × 1000, and far from
    /// `UInt64.max`, so that base + revision cannot overflow. A larger or unreadable value (an operator's edit) is
    /// ignored: it must not take the nodes down.
    public static let maxSeqBase: UInt64 = 1 << 60

    /// The base written in `value`, if it is one.
    static func seqBase(_ value: String) -> UInt64? {
        guard let base = UInt64(value), base <= maxSeqBase else { return nil }
        return base
    }

    public init(keys: ClusterKeys = ClusterKeys()) { self.keys = keys }

    /// The live incarnations of `node` (more than one only while a restarted node's previous run has not ended).
    public func incarnations(of node: String) -> [ClusterKeys.Incarnation] {
        incarnations.keys.filter { $0.node == node }.sorted { $0.lease < $1.lease }
    }

    /// Applies one batch of watch events (whole revisions, in order). Changes come out in revision order; within a
    /// revision, incarnations that start come first and those that end come last, after their sessions.
    public mutating func apply(_ events: [EtcdEvent]) -> [Change] {
        var changes: [Change] = []
        var start = events.startIndex
        while start < events.endIndex {
            let revision = events[start].kv.modRevision
            var end = start
            while end < events.endIndex, events[end].kv.modRevision == revision { end += 1 }
            changes += applyRevision(events[start..<end], revision: revision)
            start = end
        }
        return changes
    }

    /// Replaces the copy by a snapshot read at `revision` (after a watch fell behind compaction, or after the
    /// node was cut off), and returns the changes that take the old copy to the new one, all at `revision`.
    public mutating func load(snapshot: [EtcdKeyValue], revision: Int64) -> [Change] {
        var fresh = ClusterReplica(keys: keys)
        fresh.revision = revision
        for kv in snapshot {
            switch keys.entry(kv.key) {
            case .node(let incarnation): fresh.incarnations[incarnation] = kv.value
            case .session(let session): fresh.sessions[session] = kv.value
            case .user(let user): fresh.users[user] = kv.value
            case .group(let group): fresh.groups[group] = kv.value
            case .privacy(let key): fresh.privacy[key] = kv.value
            case .lost(let incarnation): fresh.losses[incarnation] = kv.value
            // Written once; the base a node learned first stays, whatever the key says now (a later value, an
            // operator's mistake, must not move seqs back or apart between nodes).
            case .cluster: fresh.seqBase = seqBase ?? Self.seqBase(kv.value)
            case nil: continue
            }
        }
        // A session lives only under a live incarnation (a node's lease): one put by hand without one would never end.
        fresh.sessions = fresh.sessions.filter { fresh.incarnations[$0.key.incarnation] != nil }
        var changes: [Change] = []
        for (incarnation, value) in fresh.incarnations.sorted(by: { $0.key.description < $1.key.description })
        where incarnations[incarnation] != value {
            changes.append(.incarnationStarted(incarnation, value: value, revision: revision))
        }
        // Ends before puts: a rejoined node's session under its new key comes after the end of its old one, as the
        // watching nodes saw them, so that the user's record after the load is theirs (its `since` the new key's).
        for session in sessions.keys.sorted(by: { $0.description < $1.description })
        where fresh.sessions[session] == nil {
            let lost = fresh.incarnations[session.incarnation] == nil
            changes.append(.sessionEnded(session, lost ? .nodeLost : .ended, revision: revision))
        }
        for (session, value) in fresh.sessions.sorted(by: { $0.key.description < $1.key.description })
        where sessions[session] != value {
            changes.append(.sessionPut(session, value: value, revision: revision))
        }
        for (incarnation, value) in fresh.losses.sorted(by: { $0.key.description < $1.key.description })
        where losses[incarnation] != value {
            changes.append(.lossStamped(incarnation, value: value, revision: revision))
        }
        for incarnation in losses.keys.sorted(by: { $0.description < $1.description })
        where fresh.losses[incarnation] == nil {
            changes.append(.lossStampDeleted(incarnation, revision: revision))
        }
        for (user, value) in fresh.users.sorted(by: { $0.key < $1.key }) where users[user] != value {
            changes.append(.userPut(user, value: value, revision: revision))
        }
        for user in users.keys.sorted() where fresh.users[user] == nil {
            changes.append(.userDeleted(user, revision: revision))
        }
        for (group, value) in fresh.groups.sorted(by: { $0.key < $1.key }) where groups[group] != value {
            changes.append(.groupPut(group, value: value, revision: revision))
        }
        for group in groups.keys.sorted() where fresh.groups[group] == nil {
            changes.append(.groupDeleted(group, revision: revision))
        }
        for (key, value) in fresh.privacy.sorted(by: { keys.key(.privacy($0.key)) < keys.key(.privacy($1.key)) })
        where privacy[key] != value {
            changes.append(.privacyPut(key, value: value, revision: revision))
        }
        for key in privacy.keys.sorted(by: { keys.key(.privacy($0)) < keys.key(.privacy($1)) })
        where fresh.privacy[key] == nil {
            changes.append(.privacyDeleted(key, revision: revision))
        }
        for incarnation in incarnations.keys.sorted(by: { $0.description < $1.description })
        where fresh.incarnations[incarnation] == nil {
            changes.append(.incarnationEnded(incarnation, revision: revision))
        }
        self = fresh
        return changes
    }

    private mutating func applyRevision(_ events: ArraySlice<EtcdEvent>, revision: Int64) -> [Change] {
        guard revision > self.revision else { return [] }  // Already applied (a snapshot covered it).
        self.revision = revision
        // Incarnations that end in this revision: their sessions deleted in it were lost with them.
        var ending: Set<ClusterKeys.Incarnation> = []
        for event in events where event.kind == .delete {
            if case .node(let incarnation) = keys.entry(event.kv.key) { ending.insert(incarnation) }
        }
        var started: [Change] = []
        var changes: [Change] = []
        var ended: [Change] = []
        for event in events {
            switch (keys.entry(event.kv.key), event.kind) {
            case (.node(let incarnation), .put):
                let isNew = incarnations[incarnation] == nil
                incarnations[incarnation] = event.kv.value
                if isNew { started.append(.incarnationStarted(incarnation, value: event.kv.value, revision: revision)) }
            case (.node(let incarnation), .delete):
                if incarnations.removeValue(forKey: incarnation) != nil {
                    ended.append(.incarnationEnded(incarnation, revision: revision))
                }
            case (.session(let session), .put):
                // Only under a live incarnation: a node writes its incarnation before (or with) its sessions, and a
                // session put by hand without one would have no lease to end it.
                guard incarnations[session.incarnation] != nil else { continue }
                sessions[session] = event.kv.value
                changes.append(.sessionPut(session, value: event.kv.value, revision: revision))
            case (.session(let session), .delete):
                guard sessions.removeValue(forKey: session) != nil else { continue }
                let lost = ending.contains(session.incarnation) || incarnations[session.incarnation] == nil
                changes.append(.sessionEnded(session, lost ? .nodeLost : .ended, revision: revision))
            case (.user(let user), .put):
                users[user] = event.kv.value
                changes.append(.userPut(user, value: event.kv.value, revision: revision))
            case (.user(let user), .delete):
                if users.removeValue(forKey: user) != nil { changes.append(.userDeleted(user, revision: revision)) }
            case (.group(let group), .put):
                groups[group] = event.kv.value
                changes.append(.groupPut(group, value: event.kv.value, revision: revision))
            case (.group(let group), .delete):
                if groups.removeValue(forKey: group) != nil { changes.append(.groupDeleted(group, revision: revision)) }
            case (.privacy(let key), .put):
                privacy[key] = event.kv.value
                changes.append(.privacyPut(key, value: event.kv.value, revision: revision))
            case (.privacy(let key), .delete):
                if privacy.removeValue(forKey: key) != nil {
                    changes.append(.privacyDeleted(key, revision: revision))
                }
            case (.lost(let incarnation), .put):
                losses[incarnation] = event.kv.value
                changes.append(.lossStamped(incarnation, value: event.kv.value, revision: revision))
            case (.lost(let incarnation), .delete):
                if losses.removeValue(forKey: incarnation) != nil {
                    changes.append(.lossStampDeleted(incarnation, revision: revision))
                }
            case (.cluster, .put):
                // Written once; a later value (an operator's mistake) must not move seqs back.
                if seqBase == nil { seqBase = Self.seqBase(event.kv.value) }
            case (.cluster, .delete):
                continue
            case (nil, _):
                continue
            }
        }
        return started + changes + ended
    }
}
