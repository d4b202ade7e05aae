import RollCallCluster
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

    /// `privacy`, `contacts` and `block` on a single broker. A node of a cluster answers them in
    /// ``handle(_:connection:access:now:)``, after etcd (``editClusterPrivacy(_:now:)``).
    mutating func editPrivacy(_ request: Request, now: BrokerTime) -> Result<Reply, PresenceError> {
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

    /// `privacy`, `contacts` and `block` on a node of a cluster: the edit is checked here, against the cluster's view
    /// and what this node wrote and has not read back yet, and the choice it changes (the policy, the contacts or the
    /// blocks) is written whole to etcd, from where every node, this one included, applies it at the write's
    /// revision, freezing the same records with the same seqs (docs/privacy.md, "Clusters").
    ///
    /// The reply waits until the write is back from etcd and applied here (``Answer/afterEtcd(ticket:)``): an edit
    /// acknowledged is in etcd, and a `block` holds on this node, before the client hears `ok`. An edit that changes
    /// nothing waits for this node's earlier write of the same choice, if one is not back yet.
    mutating func editClusterPrivacy(_ request: Request, now: BrokerTime) -> Answer {
        // A node cut off from the cluster cannot vouch that its edit will hold, nor for what the user chose.
        if let refusal = clusterRefusal { return .reply(.failure(refusal)) }
        let user: UserID
        let field: ClusterKeys.PrivacyField
        switch request {
        case .privacy(let u, _, _): (user, field) = (u, .policy)
        case .contacts(let u, _): (user, field) = (u, .contacts)
        case .block(let u, _): (user, field) = (u, .blocks)
        default: return .reply(.failure(PresenceError(.badRequest, "\(request.op) is not a privacy request")))
        }
        var current = published.choices(of: user)
        withCluster { side in
            for field in ClusterKeys.PrivacyField.allCases {
                guard let value = side.writtenPrivacy[ClusterKeys.PrivacyKey(user: user.rawValue, field: field)]
                else { continue }
                _ = ClusterValues.decode(field, value, into: &current)
            }
        }
        var choices = current
        let result: Result<Reply, PresenceError>
        switch request {
        case .privacy(_, let visibility, let lastSeen):
            if let visibility { choices.policy.visibility = visibility }
            if let lastSeen { choices.policy.lastSeen = lastSeen }
            result = .success(.privacy(choices.policy))
        case .contacts(_, let edit):
            result = published.editedList(current.contacts, edit, of: user, what: "contacts").map { contacts in
                choices.contacts = contacts
                return .listCount(name: "contacts", count: contacts.count)
            }
        case .block(_, let edit):
            if case .set = edit {
                return .reply(.failure(PresenceError(.badRequest, "block takes add or remove, not set")))
            }
            result = published.editedList(current.blocks, edit, of: user, what: "blocks").map { blocks in
                choices.blocks = blocks
                return .listCount(name: "blocks", count: blocks.count)
            }
        default:
            return .reply(.failure(PresenceError(.badRequest, "\(request.op) is not a privacy request")))
        }
        guard case .success = result else { return .reply(result) }
        let key = ClusterKeys.PrivacyKey(user: user.rawValue, field: field)
        guard choices != current else {
            // Nothing to write; but what it answers may rest on this node's earlier write, not back yet.
            guard let written = withCluster({ $0.writtenPrivacy[key] }) ?? nil else { return .reply(result) }
            return awaitEdit(key, value: written, reply: result, now: now)
        }
        let value = ClusterValues.encode(field, of: choices, at: now)
        guard value.utf8.count <= ClusterSide.maxChoiceBytes else {
            return .reply(
                .failure(
                    PresenceError(
                        .limit,
                        "\(user)'s \(field.rawValue) would take \(value.utf8.count) bytes in etcd; a node of a cluster "
                            + "writes at most \(ClusterSide.maxChoiceBytes)")))
        }
        withCluster { $0.writtenPrivacy[key] = value }
        effects.append(.clusterWrite(.putPrivacy(key, value: value)))
        return awaitEdit(key, value: value, reply: result, now: now)
    }

    /// Keeps `reply` until the write of `value` to `key` comes back from etcd.
    private mutating func awaitEdit(
        _ key: ClusterKeys.PrivacyKey, value: String, reply: Result<Reply, PresenceError>, now: BrokerTime
    ) -> Answer {
        let ticket =
            withCluster { side in
                side.lastTicket += 1
                side.awaitedEdits.append(
                    ClusterSide.AwaitedEdit(ticket: side.lastTicket, key: key, value: value, reply: reply, since: now))
                return side.lastTicket
            } ?? UInt64(0)
        return .afterEtcd(ticket: ticket)
    }

    /// Answers the awaited edits that `matches` with `error`: etcd refused them, or this node cannot tell whether it
    /// has them.
    mutating func answerAwaitedEdits(where matches: (ClusterSide.AwaitedEdit) -> Bool, with error: PresenceError) {
        for edit in withCluster({ $0.takeAwaitedEdits(where: matches) }) ?? [] {
            effects.append(.answer(ticket: edit.ticket, .failure(error)))
        }
    }

    /// Answers the edits that waited for etcd longer than ``ClusterSide/editConfirmationMilliseconds`` (their write
    /// may have been overtaken by a snapshot of etcd after a compaction, so that it never comes back as itself). The
    /// next edit then starts from the cluster's view again, not from a write that may never come back: sent again,
    /// the edit is written again.
    mutating func answerUnconfirmedEdits(now: BrokerTime) {
        guard let first = withCluster({ $0.awaitedEdits.first }) ?? nil,
            now - first.since >= ClusterSide.editConfirmationMilliseconds
        else { return }
        let late = { (edit: ClusterSide.AwaitedEdit) in now - edit.since >= ClusterSide.editConfirmationMilliseconds }
        withCluster { side in
            for edit in side.awaitedEdits where late(edit) && side.writtenPrivacy[edit.key] == edit.value {
                side.writtenPrivacy[edit.key] = nil
            }
        }
        answerAwaitedEdits(
            where: late,
            with: PresenceError(
                .clusterUnavailable,
                "etcd did not confirm the edit within \(ClusterSide.editConfirmationMilliseconds) ms: it may still "
                    + "take effect; send it again"))
    }

    /// One of a user's privacy choices came from etcd (any node's edit, this one's included; `nil`: its key was
    /// deleted, the default again): the view applies it at the write's revision and time, and each WebSocket
    /// subscriber of the user whose view changed gets its new view.
    mutating func applyClusterChoice(
        _ key: ClusterKeys.PrivacyKey, value: String?, revision: Int64, now: BrokerTime
    ) {
        guard let user = UserID(validating: key.user) else { return }
        var choices = published.choices(of: user)
        let time: BrokerTime?
        if let value {
            time = ClusterValues.decode(key.field, value, into: &choices)
        } else {
            let defaults = PrivacyChoices()
            switch key.field {
            case .policy: choices.policy = defaults.policy
            case .contacts: choices.contacts = defaults.contacts
            case .blocks: choices.blocks = defaults.blocks
            }
            // Deleted by hand: no node wrote a time; the last one etcd held is the same on every node.
            time = withCluster { $0.choiceTimes[key] } ?? nil ?? now
        }
        guard let time else {
            effects.append(
                .warning(
                    "a user's privacy choice in etcd cannot be read; left out",
                    ["user": key.user, "choice": key.field.rawValue]))
            return
        }
        // Read in place: a copy of the side held across the edit below would copy the whole view.
        guard
            let (stamp, before) = withCluster({ side in
                (
                    side.stamp(time: time, revision: revision),
                    side.view.privacySnapshot(of: user, now: now)
                )
            })
        else { return }
        withPublished { $0.setChoices(user, choices, stamp: stamp, now: now) }
        effects.append(.resendViews(before))
        let identifiesViewers = configuration.identifiesViewers
        let (warn, confirmed): (Bool, [ClusterSide.AwaitedEdit]) =
            withCluster { side in
                if let value, side.writtenPrivacy[key] == value { side.writtenPrivacy[key] = nil }
                side.choiceTimes[key] = value == nil ? nil : time
                let warn = !side.warnedOfPrivacyWithoutViewers && value != nil && !identifiesViewers
                if warn { side.warnedOfPrivacyWithoutViewers = true }
                // This node's edits of that value are in etcd now, and applied here.
                let confirmed = value.map { value in side.takeAwaitedEdits { $0.key == key && $0.value == value } }
                return (warn, confirmed ?? [])
            } ?? (false, [])
        // Their replies go after the views they changed.
        for edit in confirmed { effects.append(.answer(ticket: edit.ticket, edit.reply)) }
        if warn {
            // Without keys or tokens every peer is an operator and sees the truth (docs/privacy.md), as at the start
            // of a single broker that restores privacy settings.
            effects.append(
                .warning(
                    "the cluster holds privacy choices, which have no effect on this node: no CURVE keys or "
                        + "WebSocket tokens are configured (logged once)", ["user": key.user]))
        }
    }

    /// A contacts file (`--contacts-file`, read at start and on SIGHUP): sets the contacts of every user it lists, as
    /// op `contacts` with `set` would, and each WebSocket subscriber of such a user whose view changed gets its new
    /// view at once. Users the file does not list keep theirs. Checked whole first: a list the core would refuse
    /// refuses the file, changing nothing. Answers how many users' contacts changed.
    mutating func loadContacts(_ lists: [ContactList], now: BrokerTime) -> Result<Int, PresenceError> {
        if case .cluster = publishing {
            return .failure(
                PresenceError(
                    .unknownOp, "a contacts file is not read on a node of a cluster: set contacts with op contacts"))
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
