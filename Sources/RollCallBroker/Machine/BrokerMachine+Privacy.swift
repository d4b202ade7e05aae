import RollCallCore
import RollCallWire

/// `privacy`, `contacts` and `block` (docs/privacy.md): the core decides; the machine asks the loop to give each
/// WebSocket subscriber of the user whose view changed its new view at once.
extension BrokerMachine {
    /// Whether `user`'s records may differ from one viewer to another. Asked on every publication: it reads the
    /// core in place rather than through ``published``, which copies the core value.
    func restricts(_ user: UserID) -> Bool {
        if case .cluster(let side) = publishing { return side.view.restricts(user) }
        return core.restricts(user)
    }

    /// Whether `user` is a member of `group` in the published core (a `user` key reads only its user's groups), read
    /// in place as ``restricts(_:)`` is.
    func isMember(_ user: UserID, of group: GroupID) -> Bool {
        if case .cluster(let side) = publishing { return side.view.isMember(user, of: group) }
        return core.isMember(user, of: group)
    }

    /// A `group` reply as `viewer` sees it (blocks between members), from the published core read in place.
    func groupSnapshot(_ snapshot: GroupSnapshot, for viewer: UserID, now: BrokerTime) -> GroupSnapshot {
        if case .cluster(let side) = publishing { return side.view.groupSnapshot(snapshot, for: viewer, now: now) }
        return core.groupSnapshot(snapshot, for: viewer, now: now)
    }

    /// Whether any user blocks anyone: only then may a group message differ from one member to another.
    var hasBlocks: Bool {
        if case .cluster(let side) = publishing { return side.view.hasBlocks }
        return core.hasBlocks
    }

    mutating func editPrivacy(_ request: Request, now: BrokerTime) -> Result<Reply, PresenceError> {
        // The settings live in this node's core; a cluster would need them in etcd to hold on every node.
        if case .cluster = publishing {
            return .failure(
                PresenceError(.unknownOp, "\(request.op) is not available on a node of a cluster (docs/privacy.md)"))
        }
        let result: Result<Reply, PresenceError>
        let before: PrivacySnapshot
        switch request {
        case .privacy(let user, let visibility, let lastSeen):
            before = core.privacySnapshot(of: user, now: now)
            result = .success(.privacy(core.setPrivacy(user, visibility: visibility, lastSeen: lastSeen, now: now)))
        case .contacts(let user, let edit):
            before = core.privacySnapshot(of: user, now: now)
            result = core.editContacts(user, edit, now: now).map { .listCount(name: "contacts", count: $0) }
        case .block(let user, let edit):
            before = core.privacySnapshot(of: user, now: now)
            result = core.editBlocks(user, edit, now: now).map { .listCount(name: "blocks", count: $0) }
        default:
            return .failure(PresenceError(.badRequest, "\(request.op) is not a privacy request"))
        }
        if case .success = result { effects.append(.resendViews(before)) }
        return result
    }

    /// A contacts file (`--contacts-file`, read at start and on SIGHUP): sets the contacts of every user it lists, as
    /// op `contacts` with `set` would, and each WebSocket subscriber of such a user whose view changed gets its new
    /// view at once. Users the file does not list keep theirs. Checked whole first: a list the core would refuse
    /// refuses the file, changing nothing. Answers how many users' contacts changed.
    mutating func loadContacts(_ lists: [ContactList], now: BrokerTime) -> Result<Int, PresenceError> {
        if case .cluster = publishing {
            return .failure(PresenceError(.unknownOp, "contacts are not available on a node of a cluster"))
        }
        if let refusal = core.refusal(ofContacts: lists) { return .failure(refusal) }
        var changed = 0
        for list in lists where !core.hasContacts(list.user, equalTo: list.contacts) {
            effects.append(.resendViews(core.privacySnapshot(of: list.user, now: now)))
            core.setContacts(list.user, to: list.contacts, now: now)
            changed += 1
        }
        return .success(changed)
    }
}
