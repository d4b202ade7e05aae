/// Blocks inside groups (docs/privacy.md): the members of a group share presence with each other whatever their
/// visibility policy (the backend that made the group decided it), but a member who blocks another member counts
/// as offline, with the record of a bye at the moment of the block, in what that member receives of the group: the
/// `group` reply and the group's messages on its WebSocket subscriptions. Everyone else gets the shared message.
extension PresenceCore {
    /// Whether any user blocks anyone: without blocks, every member of every group gets the shared messages.
    public var hasBlocks: Bool { !blockedBy.isEmpty }

    /// The members of `group` who block `viewer`, sorted: hidden from it inside the group.
    public func membersBlocking(_ viewer: UserID, in group: GroupID) -> [UserID] {
        guard let blockers = blockedBy[viewer] else { return [] }
        return blockers.filter { isMember($0, of: group) }.sorted()
    }

    /// A `group` reply as `viewer` sees it: each member who blocks `viewer` counts as offline and shows its view
    /// (the record of a bye, frozen when the block came).
    public func groupSnapshot(_ snapshot: GroupSnapshot, for viewer: UserID, now: BrokerTime) -> GroupSnapshot {
        let hidden = membersBlocking(viewer, in: snapshot.group)
        guard !hidden.isEmpty else { return snapshot }
        var shown = snapshot
        shown.counts = counts(snapshot.counts, hiding: hidden)
        shown.members = snapshot.members.map {
            hidden.contains($0.user) ? view(of: $0.user, for: viewer, now: now) : $0
        }
        return shown
    }

    /// A group message as `viewer` sees it: the same rule as ``groupSnapshot(_:for:now:)``, for the counts and the
    /// changed records. A deletion is the same for everyone.
    public func groupUpdate(_ update: GroupUpdate, for viewer: UserID, now: BrokerTime) -> GroupUpdate {
        guard !update.deleted else { return update }
        let hidden = membersBlocking(viewer, in: update.group)
        guard !hidden.isEmpty else { return update }
        var shown = update
        shown.counts = counts(update.counts, hiding: hidden)
        shown.changed = update.changed.map {
            hidden.contains($0.user) ? view(of: $0.user, for: viewer, now: now) : $0
        }
        return shown
    }

    /// `counts` with the members of `hidden` moved to offline, from the status each has now.
    private func counts(_ counts: StatusCounts, hiding hidden: [UserID]) -> StatusCounts {
        var counts = counts
        for user in hidden {
            counts[users[user]?.status ?? .offline] -= 1
            counts[.offline] += 1
        }
        return counts
    }
}
