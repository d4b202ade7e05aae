/// What the broker keeps across restarts, and bringing it back.
extension PresenceCore {
    /// A group as it is kept: members and latest seq.
    public struct GroupDefinition: Sendable, Equatable {
        public var group: GroupID
        public var members: [UserID]
        public var seq: UInt64
        public init(group: GroupID, members: [UserID], seq: UInt64) {
            self.group = group
            self.members = members
            self.seq = seq
        }
    }

    /// Changes to keep: the records that changed, the groups defined or edited, the groups deleted.
    public struct Changes: Sendable, Equatable {
        public var records: [PresenceRecord] = []
        public var groups: [GroupDefinition] = []
        public var deletedGroups: [GroupID] = []
        public var isEmpty: Bool { records.isEmpty && groups.isEmpty && deletedGroups.isEmpty }
    }

    /// Whether anything changed since ``takeChanges(now:)`` was last called.
    public var hasChanges: Bool { !changedUsers.isEmpty || !changedGroups.isEmpty || !changedPrivacy.isEmpty }

    /// The changes since the last call, as of `now`. A group's messages do not count as changes: its seq, like a
    /// user's, comes from the clock, so a restart continues above it without it being written each time.
    public mutating func takeChanges(now: BrokerTime) -> Changes {
        var changes = Changes()
        changes.records = changedUsers.sorted().map { record(of: $0, now: now) }
        for id in changedGroups.sorted() {
            if let state = groups[id] {
                changes.groups.append(GroupDefinition(group: id, members: state.sorted, seq: state.seq))
            } else {
                changes.deletedGroups.append(id)
            }
        }
        changedUsers = []
        changedGroups = []
        return changes
    }

    /// Everything there is to keep, as of `now`: every user's record and every group, for a store that starts
    /// empty (its file was made anew). Changes noted so far stay noted.
    public func everything(now: BrokerTime) -> Changes {
        var all = Changes()
        // A user never published (seq 0, such as one whose only session is invisible) is not kept: kept, it would
        // come back after a restart as a user the broker knew.
        all.records = users.keys.sorted().map { record(of: $0, now: now) }.filter { $0.seq > 0 }
        all.groups = groups.keys.sorted().map { id in
            GroupDefinition(group: id, members: groups[id]!.members.sorted(), seq: groups[id]!.seq)
        }
        return all
    }

    /// Brings back what was kept, into an empty core, as the broker starts.
    ///
    /// Users who were available stay available for one default TTL, through a placeholder session, so that their
    /// clients can say hello again: a hello takes the placeholder's place without any message, and a user who does
    /// not come back is published offline with reason `restart` when it runs out. Nothing is published by the
    /// restore itself.
    public mutating func restore(records: [PresenceRecord], groups definitions: [GroupDefinition], now: BrokerTime) {
        precondition(users.isEmpty && sessions.isEmpty && groups.isEmpty, "restore into an empty core only")
        let ttl = configuration.defaultTTLMilliseconds
        for record in records {
            var user = User(
                status: record.status, text: record.text, since: record.since, lastSeen: record.lastSeen,
                seq: record.seq, reason: record.reason, offset: record.offset ?? 0)
            if record.status.isAvailable {
                let id = SessionID("restored/\(record.user.rawValue)")  // '/' is never in a broker-made token
                statusChanges += 1
                sessions[id] = .placeholder(
                    user: record.user, status: record.status, text: record.text, statusOrder: statusChanges, ttl: ttl,
                    now: now)
                expiries.insert(ExpiryCheck(at: now + ttl, session: id))
                user.sessions = [id]
                availableUserCount += 1
                placeholderCount += 1
            }
            user.publishedSessions = user.sessions.count
            // Every restored record takes a new seq from the clock: the previous run may have published changes
            // it never wrote (a kill -9 between two batches), with seqs above the kept one, and a subscriber that
            // saw them must never be handed a lower seq. The clock is past anything that run could have issued.
            user.seq = nextSeq(after: user.seq, now: now)
            if record.sessions != user.sessions.count {
                // The sessions are gone (a placeholder stands for them): that is a new record to keep.
                if tracksChanges { changedUsers.insert(record.user) }
            }
            users[record.user] = user
        }
        for definition in definitions {
            var state = GroupState(seq: nextSeq(after: definition.seq, now: now))  // as for records, above
            state.members = Set(definition.members)
            state.sorted = state.members.sorted()
            for member in state.members {
                state.counts[users[member]?.status ?? .offline] += 1
                memberships[member, default: []].insert(definition.group)
            }
            membershipTotal += state.members.count
            groups[definition.group] = state
        }
    }
}
