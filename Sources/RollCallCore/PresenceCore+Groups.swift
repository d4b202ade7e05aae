import HeapModule

/// Groups: named sets of users with an aggregate, published in batches.
///
/// A member's change costs work in proportion to the groups that user is in (`memberships` indexes them). Only
/// groups with something to say are in the flush heap, so a quiet group costs nothing per tick. A group with news
/// is published at once if its previous message is at least a batch window old, else when the window closes: at
/// most one message per group per window, and no change waits longer than one window.
extension PresenceCore {
    struct GroupState: Sendable {
        var members: Set<UserID> = []
        /// The members in id order, for paged reads (docs/protocol.md §6.7).
        var sorted: [UserID] = []
        var counts = StatusCounts()
        var seq: UInt64 = 0
        var changed: Set<UserID> = []
        var removed: Set<UserID> = []
        var lastPublished: BrokerTime?
        var flushAt: BrokerTime?
    }

    struct GroupFlush: Comparable, Sendable {
        var at: BrokerTime
        var group: GroupID
        static func < (lhs: GroupFlush, rhs: GroupFlush) -> Bool { lhs.at < rhs.at }
    }

    /// The groups `user` is in, sorted.
    public func groups(of user: UserID) -> [GroupID] { memberships[user]?.sorted() ?? [] }

    /// Whether `user` is a member of `group` (a `user` key reads only its user's groups).
    public func isMember(_ user: UserID, of group: GroupID) -> Bool { memberships[user]?.contains(group) == true }

    /// The number of groups and of memberships over all groups.
    public var groupCount: Int { groups.count }
    public var membershipCount: Int { membershipTotal }

    /// Defines, edits or reads a group, and answers its aggregate and a page of members' records: at most `limit`
    /// members after `after` in id order (see ``snapshot(of:after:limit:now:)``).
    public mutating func group(
        _ id: GroupID, _ edit: GroupEdit, after: UserID? = nil, limit: Int = .max, now: BrokerTime
    ) -> Result<GroupSnapshot, PresenceError> {
        if let error = validate(edit, of: id) { return .failure(error) }
        guard groups[id] != nil || (edit.members != nil || !edit.add.isEmpty) else {
            // Reading, or removing from, a group that does not exist.
            return .success(snapshot(of: id, after: after, limit: limit, now: now))
        }
        let existed = groups[id] != nil
        var state = groups.removeValue(forKey: id) ?? GroupState(seq: retiredGroupSeqs.removeValue(forKey: id) ?? 0)
        let target = edit.members.map(Set.init) ?? state.members.union(edit.add).subtracting(edit.remove)
        let added = target.subtracting(state.members)
        let taken = state.members.subtracting(target)
        for user in added {
            state.counts[status(of: user)] += 1
            memberships[user, default: []].insert(id)
        }
        for user in taken {
            state.counts[status(of: user)] -= 1
            memberships[user]?.remove(id)
            if memberships[user]?.isEmpty == true { memberships[user] = nil }
        }
        membershipTotal += added.count - taken.count
        state.members = target
        if added.count + taken.count > 64 {
            state.sorted = target.sorted()
        } else {
            // A small edit keeps the order by binary search instead of sorting the whole group again.
            for user in taken { state.sorted.remove(at: state.sorted.insertionIndex(of: user)) }
            for user in added { state.sorted.insert(user, at: state.sorted.insertionIndex(of: user)) }
        }
        state.changed.formUnion(added)
        state.changed.subtract(taken)
        state.removed.formUnion(taken)
        state.removed.subtract(added)
        if !existed { state.seq = nextSeq(after: state.seq, now: now) }
        if tracksChanges && (!added.isEmpty || !taken.isEmpty || !existed) { changedGroups.insert(id) }
        groups[id] = state
        if !added.isEmpty || !taken.isEmpty || !existed { scheduleFlush(id, now: now) }
        return .success(snapshot(of: id, after: after, limit: limit, now: now))
    }

    /// Deletes a group. Answers whether it existed, with its deletion message to publish.
    public mutating func ungroup(_ id: GroupID, now: BrokerTime) -> Outcome<Bool> {
        guard let state = groups.removeValue(forKey: id) else { return Outcome(.success(false)) }
        for user in state.sorted {
            memberships[user]?.remove(id)
            if memberships[user]?.isEmpty == true { memberships[user] = nil }
        }
        membershipTotal -= state.members.count
        if tracksChanges { changedGroups.insert(id) }
        let seq = nextSeq(after: state.seq, now: now)
        if retiredGroupSeqs.count >= 10_000 {
            // Older retired seqs are below any seq the clock now gives: they no longer need keeping.
            let floor = nextSeq(after: 0, now: now)
            retiredGroupSeqs = retiredGroupSeqs.filter { $0.value >= floor }
        }
        retiredGroupSeqs[id] = seq
        let deletion = GroupUpdate(group: id, counts: StatusCounts(), changed: [], removed: [], seq: seq, deleted: true)
        return Outcome(.success(true), actions: [.publishGroup(deletion)])
    }

    /// The group's aggregate and every member's record; an unknown group has no members and seq 0.
    public func snapshot(of id: GroupID, now: BrokerTime) -> GroupSnapshot {
        snapshot(of: id, after: nil, limit: .max, now: now)
    }

    /// The group's aggregate and the records of at most `limit` members whose ids come after `after` (all from the
    /// first when `after` is nil), in id order; `next` names the last of them when more members follow. The cost
    /// is `limit` records and a binary search, whatever the group's size.
    public func snapshot(of id: GroupID, after: UserID?, limit: Int, now: BrokerTime) -> GroupSnapshot {
        guard let state = groups[id] else {
            return GroupSnapshot(group: id, counts: StatusCounts(), members: [], seq: retiredGroupSeqs[id] ?? 0)
        }
        var start = 0
        if let after {
            start = state.sorted.insertionIndex(of: after)
            if start < state.sorted.count && state.sorted[start] == after { start += 1 }
        }
        let end = start + min(max(limit, 1), state.sorted.count - start)
        let page = state.sorted[start..<end].map { record(of: $0, now: now) }
        return GroupSnapshot(
            group: id, counts: state.counts, members: page, seq: state.seq,
            next: end < state.sorted.count ? page.last?.user : nil)
    }

    /// The message a new subscriber of `group/<id>/` gets at once: the aggregate with no changes. Like every group
    /// message it takes a new seq, so the batched message that follows it is never mistaken for a duplicate.
    public mutating func groupHeader(of id: GroupID, now: BrokerTime) -> GroupUpdate {
        guard var state = groups[id] else {
            return GroupUpdate(
                group: id, counts: StatusCounts(), changed: [], removed: [], seq: retiredGroupSeqs[id] ?? 0)
        }
        state.seq = nextSeq(after: state.seq, now: now)
        groups[id] = state
        return GroupUpdate(group: id, counts: state.counts, changed: [], removed: [], seq: state.seq)
    }

    /// A new seq for a message on the group's topic beyond those the core made: the later parts of a group message
    /// that the broker splits to bound its size.
    public mutating func issueGroupSeq(_ id: GroupID, now: BrokerTime) -> UInt64 {
        guard var state = groups[id] else { return nextSeq(after: retiredGroupSeqs[id] ?? 0, now: now) }
        state.seq = nextSeq(after: state.seq, now: now)
        groups[id] = state
        return state.seq
    }

    /// The messages of every group whose batch window has closed (part of ``tick(now:)``).
    mutating func flushGroups(now: BrokerTime) -> [GroupUpdate] {
        var updates: [GroupUpdate] = []
        while let flush = groupFlushes.min, flush.at <= now {
            groupFlushes.removeMin()
            guard var state = groups[flush.group], state.flushAt == flush.at else { continue }
            state.seq = nextSeq(after: state.seq, now: now)
            updates.append(
                GroupUpdate(
                    group: flush.group, counts: state.counts,
                    changed: state.changed.sorted().map { record(of: $0, now: now) }, removed: state.removed.sorted(),
                    seq: state.seq))
            state.changed = []
            state.removed = []
            state.flushAt = nil
            state.lastPublished = now
            groups[flush.group] = state
        }
        return updates
    }

    /// Records that a member's record changed (and its status, from `old` to `new`) in every group it belongs to.
    mutating func noteMemberChange(_ user: UserID, from old: Status, to new: Status, now: BrokerTime) {
        guard let ids = memberships[user] else { return }
        for id in ids {
            guard var state = groups.removeValue(forKey: id) else { continue }
            if old != new {
                state.counts[old] -= 1
                state.counts[new] += 1
            }
            state.changed.insert(user)
            groups[id] = state
            scheduleFlush(id, now: now)
        }
    }

    /// `user` blocked or unblocked the viewers in `toggled` (`blocked`: whom it blocks now): keeps ``blockedBy``, and
    /// in every group of `user` that one of them is a member of, notes `user` as changed, so that the group's next
    /// message (within a window) gives those members their new view of `user` (PresenceCore+GroupBlocks.swift).
    mutating func noteBlocks(by user: UserID, toggled: Set<UserID>, blocked: Set<UserID>, now: BrokerTime) {
        for viewer in toggled {
            if blocked.contains(viewer) {
                blockedBy[viewer, default: []].insert(user)
            } else {
                blockedBy[viewer]?.remove(user)
                if blockedBy[viewer]?.isEmpty == true { blockedBy[viewer] = nil }
            }
        }
        guard let ids = memberships[user] else { return }
        for id in ids where toggled.contains(where: { memberships[$0]?.contains(id) == true }) {
            groups[id]?.changed.insert(user)
            scheduleFlush(id, now: now)
        }
    }

    private mutating func scheduleFlush(_ id: GroupID, now: BrokerTime) {
        guard let state = groups[id], state.flushAt == nil else { return }
        let window = configuration.groupBatchMilliseconds
        let at = max(now, state.lastPublished.map { $0 + window } ?? now)
        groups[id]!.flushAt = at
        groupFlushes.insert(GroupFlush(at: at, group: id))
    }

    private func status(of user: UserID) -> Status { users[user]?.status ?? .offline }

    private func validate(_ edit: GroupEdit, of id: GroupID) -> PresenceError? {
        if edit.members != nil && !(edit.add.isEmpty && edit.remove.isEmpty) {
            return PresenceError(.badRequest, "give either members or add/remove, not both")
        }
        for (name, list) in [("members", edit.members ?? []), ("add", edit.add), ("remove", edit.remove)] {
            if list.count > configuration.maxGroupSize {
                return PresenceError(
                    .limit, "'\(name)' names \(list.count) users; a group holds at most \(configuration.maxGroupSize)")
            }
            if Set(list).count != list.count { return PresenceError(.badRequest, "'\(name)' lists a user twice") }
        }
        if !Set(edit.add).isDisjoint(with: edit.remove) {
            return PresenceError(.badRequest, "a user is both in 'add' and in 'remove'")
        }
        let current = groups[id]?.members ?? []
        let size = edit.members.map(\.count) ?? current.union(edit.add).subtracting(edit.remove).count
        if size > configuration.maxGroupSize {
            return PresenceError(
                .limit, "group \(id) would have \(size) members; at most \(configuration.maxGroupSize)")
        }
        let creates = groups[id] == nil && (edit.members != nil || !edit.add.isEmpty)
        if creates && groups.count >= configuration.maxGroups {
            return PresenceError(.limit, "the broker holds its maximum of \(configuration.maxGroups) groups")
        }
        if membershipTotal - current.count + size > configuration.maxMemberships {
            return PresenceError(
                .limit, "the broker holds its maximum of \(configuration.maxMemberships) group memberships")
        }
        return nil
    }
}

extension Array where Element == UserID {
    /// The index of the first element not less than `user`, in a sorted array.
    func insertionIndex(of user: UserID) -> Int {
        var (low, high) = (0, count)
        while low < high {
            let middle = (low + high) / 2
            if self[middle] < user { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
