/// Who may see whom: per-user policies, contacts and blocks, and what a viewer that may not see a user gets.
///
/// A viewer that may not see a user gets the record that user would have had if every session had said `bye` at
/// the moment the viewer lost sight (status `offline`, reason `bye` if the user was available, no text, no
/// sessions), frozen from then on. Viewers lose sight in two ways, which is what keeps this small:
/// - all at once, when the policy stops showing the user to viewers in no list ("strangers"): one `mask` record;
/// - one by one (a contact removed, a block added, contacts when the policy narrows to `nobody`): a record frozen
///   for that viewer, dropped when the viewer sees the user again.
///
/// Seqs: every privacy change of a user reserves the user's next seq (`max(seq + 1, now × 1000)`, as a record
/// would), without publishing anything. A frozen record takes the seq reserved at the moment of hiding, which is
/// exactly the seq a `bye` then would have published; a hidden viewer's view carries the latest reserved seq; and
/// the user's next record, or the current record given back with sight, is above it. So every record a viewer
/// gets has a seq above everything that viewer got before, and the seq rule takes it.
extension PresenceCore {
    /// What `viewer` may see of `user`. A user always sees itself; readers and operators do not ask.
    public func sight(of user: UserID, by viewer: UserID) -> Sight {
        guard viewer != user, let state = privacy[user] else { return .full }
        return state.sight(viewer)
    }

    /// The record of `user` as `viewer` sees it now: the public record, or the frozen record of a user who said
    /// bye, with `last_seen` and `since` null where the `last_seen` policy hides them from `viewer`.
    public func view(of user: UserID, for viewer: UserID, now: BrokerTime) -> PresenceRecord {
        privacySnapshot(of: user, now: now).view(for: viewer)
    }

    /// What every viewer sees of `user` now, kept for comparing with what they see after a privacy change.
    public func privacySnapshot(of user: UserID, now: BrokerTime) -> PrivacySnapshot {
        PrivacySnapshot(state: privacy[user], current: record(of: user, now: now))
    }

    /// Whether `user` has privacy settings: only such a user's records may differ from one viewer to another.
    public func restricts(_ user: UserID) -> Bool { privacy[user] != nil }

    /// What `viewer` receives of a record of `user` being published: nothing while hidden, or the record with
    /// `last_seen` and `since` null where the `last_seen` policy hides them.
    public func deliverable(_ record: PresenceRecord, to viewer: UserID) -> PresenceRecord? {
        guard viewer != record.user, let state = privacy[record.user] else { return record }
        let sight = state.sight(viewer)
        guard sight.status else { return nil }
        return sight.lastSeen ? record : withoutLastSeen(record)
    }

    /// Whether any user has privacy settings other than the defaults (the broker warns when they cannot apply).
    public var hasPrivacySettings: Bool { !privacy.isEmpty }

    /// The privacy policy of `user`.
    public func policy(of user: UserID) -> PrivacyPolicy { privacy[user]?.policy ?? PrivacyPolicy() }

    /// The contacts of `user`, sorted.
    public func contacts(of user: UserID) -> [UserID] { (privacy[user]?.contacts ?? []).sorted() }

    /// The users `user` blocks, sorted.
    public func blocks(of user: UserID) -> [UserID] { (privacy[user]?.blocks ?? []).sorted() }

    /// What `user` chose: the policy and both lists.
    public func choices(of user: UserID) -> PrivacyChoices {
        guard let state = privacy[user] else { return PrivacyChoices() }
        return PrivacyChoices(policy: state.policy, contacts: state.contacts, blocks: state.blocks)
    }

    /// Sets what `user` chose, whole, as a change of the cluster's store brings it (a node writes every privacy
    /// edit as the user's whole choices): the same change as the ops', at `stamp`.
    public mutating func setChoices(_ user: UserID, _ choices: PrivacyChoices, stamp: Stamp, now: BrokerTime) {
        let state = privacy[user] ?? PrivacyState()
        let candidates = state.contacts.union(state.blocks).union(choices.contacts).union(choices.blocks)
        change(user, now: now, stamp: stamp, candidates: candidates) { state in
            state.policy = choices.policy
            state.contacts = choices.contacts
            state.blocks = choices.blocks
        }
    }

    /// Sets either or both sides of the policy of `user` (neither: reads it). Answers the policy now in force.
    public mutating func setPrivacy(
        _ user: UserID, visibility: Audience?, lastSeen: Audience?, now: BrokerTime
    ) -> PrivacyPolicy {
        let state = privacy[user] ?? PrivacyState()
        change(user, now: now, candidates: state.contacts.union(state.blocks)) { state in
            if let visibility { state.policy.visibility = visibility }
            if let lastSeen { state.policy.lastSeen = lastSeen }
        }
        return policy(of: user)
    }

    /// Edits the contacts of `user`: the viewers the user shares with under the policy `contacts`. Answers how many
    /// contacts the user has now. Refused, changing nothing: a list naming a user twice or the user itself
    /// (`bad_request`), or more than ``Configuration/maxContacts`` contacts (`limit`).
    public mutating func editContacts(
        _ user: UserID, _ edit: ListEdit, now: BrokerTime
    ) -> Result<Int, PresenceError> {
        let state = privacy[user] ?? PrivacyState()
        let result = editedList(state.contacts, edit, of: user, what: "contacts")
        guard case .success(let contacts) = result else { return result.map(\.count) }
        setContacts(user, to: contacts, now: now)
        return .success(contacts.count)
    }

    /// The first list of a contacts file that op `contacts` would refuse as a `set` (`limit` past
    /// ``Configuration/maxContacts``, `bad_request` for the user in its own list), or `nil`. A file is checked
    /// whole before any list of it is applied, so that a load is all or nothing.
    public func refusal(ofContacts lists: [ContactList]) -> PresenceError? {
        let limit = configuration.maxContacts
        for list in lists {
            if list.contacts.count > limit {
                return PresenceError(
                    .limit, "\(list.user) would have \(list.contacts.count) contacts; at most \(limit)")
            }
            if list.contacts.contains(list.user) {
                return PresenceError(.badRequest, "\(list.user) cannot be in their own contacts")
            }
        }
        return nil
    }

    /// Whether `user`'s contacts are exactly `contacts`: setting them again changes nothing.
    public func hasContacts(_ user: UserID, equalTo contacts: Set<UserID>) -> Bool {
        (privacy[user]?.contacts ?? []) == contacts
    }

    /// Sets the contacts of `user` from a list already checked (``refusal(ofContacts:)``): what op `contacts` with
    /// `set` does after its checks, without building the set again.
    public mutating func setContacts(_ user: UserID, to contacts: Set<UserID>, now: BrokerTime) {
        let state = privacy[user] ?? PrivacyState()
        change(user, now: now, candidates: state.contacts.union(contacts).union(state.blocks)) {
            $0.contacts = contacts
        }
    }

    /// Edits the users `user` blocks (only `add` and `remove`; `set` is refused with `bad_request`). A blocked
    /// viewer sees `user` as hidden whatever the policy, also if a contact. Answers how many users are blocked.
    public mutating func editBlocks(
        _ user: UserID, _ edit: ListEdit, now: BrokerTime
    ) -> Result<Int, PresenceError> {
        if case .set = edit { return .failure(PresenceError(.badRequest, "block takes add or remove, not set")) }
        let state = privacy[user] ?? PrivacyState()
        let result = editedList(state.blocks, edit, of: user, what: "blocks")
        guard case .success(let blocks) = result else { return result.map(\.count) }
        change(user, now: now, candidates: state.contacts.union(state.blocks).union(blocks)) { $0.blocks = blocks }
        return .success(blocks.count)
    }

    /// `list` (the contacts or the blocks of `user`, `what` saying which) after `edit`, or why op `contacts` or
    /// `block` refuses it: a list naming a user twice or the user itself (`bad_request`), more than
    /// ``Configuration/maxContacts`` users (`limit`).
    public func editedList(
        _ list: Set<UserID>, _ edit: ListEdit, of user: UserID, what: String
    ) -> Result<Set<UserID>, PresenceError> {
        let names: [UserID]
        switch edit {
        case .set(let n), .add(let n), .remove(let n): names = n
        }
        let limit = configuration.maxContacts
        guard names.count <= limit else {
            return .failure(PresenceError(.limit, "the list names \(names.count) users; at most \(limit)"))
        }
        var seen = Set<UserID>()
        for name in names {
            guard seen.insert(name).inserted else {
                return .failure(PresenceError(.badRequest, "the list names \(name) twice"))
            }
        }
        guard !seen.contains(user) else {
            return .failure(PresenceError(.badRequest, "\(user) cannot be in their own \(what)"))
        }
        let result: Set<UserID>
        switch edit {
        case .set: result = seen
        case .add: result = list.union(seen)
        case .remove: result = list.subtracting(seen)
        }
        guard result.count <= limit else {
            return .failure(PresenceError(.limit, "\(user) would have \(result.count) \(what); at most \(limit)"))
        }
        return .success(result)
    }

    /// Applies a change to the privacy of `user`: reserves a seq, freezes the record for every viewer that loses
    /// sight and forgets it for every viewer that gets sight back. `candidates` names every viewer, in a list
    /// before or after, whose sight the change may alter one by one; viewers in no list share the mask. A change
    /// from the cluster's store carries its `stamp`: the frozen records take its time, and the seq reserved is its
    /// seq (at least), as ``refresh(_:now:reason:stamp:)`` gives a record, so that every node freezes the same records.
    private mutating func change(
        _ user: UserID, now: BrokerTime, stamp: Stamp? = nil, candidates: Set<UserID>,
        _ edit: (inout PrivacyState) -> Void
    ) {
        let before = privacy[user] ?? PrivacyState()
        var state = before
        edit(&state)
        guard state.policy != before.policy || state.contacts != before.contacts || state.blocks != before.blocks
        else { return }
        var frozen: PresenceRecord?
        if var record = users[user], record.seq > 0 {
            record.seq =
                stamp.map { $0.seq == record.seq ? $0.seq : max(record.seq + 1, $0.seq) }
                ?? nextSeq(after: record.seq, now: now)
            users[user] = record
            if tracksChanges { changedUsers.insert(user) }
            state.seq = record.seq
            frozen = byeRecord(of: user, at: stamp?.time ?? now, seq: record.seq)
        }
        var mask = before.mask
        if before.strangersSee && !state.strangersSee { mask = frozen }
        if state.strangersSee { mask = nil }
        for viewer in candidates.union(before.frozen.keys) where viewer != user {
            let saw = before.sight(viewer).status
            let sees = state.sight(viewer).status
            if sees {
                state.frozen[viewer] = nil
            } else if saw {
                state.frozen[viewer] = frozen
            } else if state.frozen[viewer] == nil, mask != before.mask {
                // Still hidden, on the mask that changes: it keeps what it was shown (the unknown record if the
                // user was not known when it lost sight).
                state.frozen[viewer] = before.mask ?? .unknown(user)
            }
        }
        state.mask = mask
        if before.concealed != state.concealed { countConcealed(user, state.concealed ? 1 : -1) }
        privacy[user] = state.isEmpty ? nil : state
        if tracksChanges { changedPrivacy.insert(user) }
        let toggled = before.blocks.symmetricDifference(state.blocks)
        if !toggled.isEmpty { noteBlocks(by: user, toggled: toggled, blocked: state.blocks, now: now) }
    }

    /// The record `user` would get if every visible session said `bye` at `time`, with `seq`; `nil` for a user
    /// never published (hidden, such a user stays unknown).
    func byeRecord(of user: UserID, at time: BrokerTime, seq: UInt64) -> PresenceRecord? {
        guard let state = users[user], state.seq > 0 else { return nil }
        var record = self.record(of: user, now: time)
        let shows = state.status != .offline || state.text != nil
        if shows || state.publishedSessions > 0 {
            if shows || record.since == nil { record.since = time }
            if state.status.isAvailable {
                record.lastSeen = time
                record.reason = .bye
            }
            record.status = .offline
            record.text = nil
            record.sessions = 0
        }
        record.seq = seq
        return record
    }

}

/// What every viewer sees of one user at one moment (``PresenceCore/privacySnapshot(of:now:)``).
public struct PrivacySnapshot: Sendable {
    let state: PrivacyState?
    /// The user's public record at that moment.
    public let current: PresenceRecord

    /// The user whose views these are.
    public var user: UserID { current.user }

    /// What `viewer` sees (``PresenceCore/view(of:for:now:)``).
    public func view(for viewer: UserID) -> PresenceRecord {
        guard viewer != current.user, let state else { return current }
        let sight = state.sight(viewer)
        var record = current
        if !sight.status {
            record = state.frozen[viewer] ?? state.mask ?? .unknown(current.user)
            if record.seq > 0 { record.seq = max(record.seq, state.seq) }
        }
        return sight.lastSeen ? record : withoutLastSeen(record)
    }
}

/// `record` with `last_seen` and `since` null if the user is not available.
func withoutLastSeen(_ record: PresenceRecord) -> PresenceRecord {
    guard !record.status.isAvailable else { return record }
    var record = record
    record.since = nil
    record.lastSeen = nil
    return record
}

extension PresenceRecord {
    /// Whether two records show the same thing, whatever their seqs (and `last_seen` of an available user, which
    /// is the time of reading): a viewer whose view stays the same needs no new record.
    public func showsSame(as other: PresenceRecord) -> Bool {
        var a = self
        a.seq = other.seq
        if a.status.isAvailable && other.status.isAvailable { a.lastSeen = other.lastSeen }
        return a == other
    }
}

/// Keeping privacy settings across restarts.
extension PresenceCore {
    /// The privacy settings changed since the last call; a user back to the defaults comes with empty settings,
    /// which the store deletes.
    public mutating func takePrivacyChanges() -> [PrivacySettings] {
        defer { changedPrivacy = [] }
        return changedPrivacy.sorted().map { settings(of: $0) }
    }

    /// Every user's privacy settings, for a store that starts empty.
    public func allPrivacySettings() -> [PrivacySettings] { privacy.keys.sorted().map { settings(of: $0) } }

    /// The privacy settings of `user` as they are kept.
    public func settings(of user: UserID) -> PrivacySettings {
        let state = privacy[user] ?? PrivacyState()
        return PrivacySettings(
            user: user, policy: state.policy, contacts: state.contacts.sorted(), blocks: state.blocks.sorted(),
            mask: state.mask,
            frozen: state.frozen.keys.sorted().map { PresenceRecord.Frozen(viewer: $0, record: state.frozen[$0]!) })
    }

    /// Brings back kept privacy settings, after ``restore(records:groups:now:)``: every hidden view takes the
    /// user's restored seq, which is above anything the previous run published.
    public mutating func restorePrivacy(_ kept: [PrivacySettings]) {
        for settings in kept where !settings.isEmpty {
            var state = PrivacyState()
            state.policy = settings.policy
            state.contacts = Set(settings.contacts)
            state.blocks = Set(settings.blocks)
            state.mask = settings.mask
            for entry in settings.frozen { state.frozen[entry.viewer] = entry.record }
            state.seq = users[settings.user]?.seq ?? 0
            privacy[settings.user] = state
            if state.concealed { countConcealed(settings.user, 1) }
            for viewer in settings.blocks { blockedBy[viewer, default: []].insert(settings.user) }
        }
    }

    /// Adds (`sign` 1) or takes away (-1) `user`'s share of the counts the broker heartbeat leaves out.
    private mutating func countConcealed(_ user: UserID, _ sign: Int) {
        guard let state = users[user] else { return }
        concealedAvailable += sign * (state.status.isAvailable ? 1 : 0)
        concealedSessions += sign * state.publishedSessions
    }
}

/// What a viewer reads of the presence log (docs/privacy.md, "The paths"): the log keeps the public records, and a
/// viewer reads them as it would have received them had the user said bye at the moment the viewer lost sight.
extension PresenceCore {
    /// The offset of the last entry of `user` that `viewer` saw before it lost sight (its view's offset), if it may
    /// not see the user now: the reader fetches that entry for ``history(_:of:for:lastSeen:now:)``. `nil` when the
    /// viewer sees the user.
    public func lostSight(of user: UserID, by viewer: UserID, now: BrokerTime) -> UInt64? {
        guard viewer != user, let state = privacy[user], !state.sight(viewer).status else { return nil }
        return view(of: user, for: viewer, now: now).offset ?? 0
    }

    /// `user`'s logged transitions `entries` (in offset order) as `viewer` may read them now:
    /// - a viewer that sees the user: every entry, `last_seen` and `since` null where the policy hides them;
    /// - a viewer that may not: the entries up to the moment it lost sight, then, if the user was available then
    ///   (`lastSeen`, the entry at ``lostSight(of:by:now:)``), the bye of its view: the record it holds now, as an
    ///   entry at that moment's time with offset `max(last + 1, time × 1000)`, where a transition then would have
    ///   been logged; nothing for a user hidden before it was ever published.
    ///
    /// The caller filters the added entry by the read's bounds (`after`, `from`, `to`), as the log filtered the rest.
    public func history(
        _ entries: [LogEntry], of user: UserID, for viewer: UserID, lastSeen: LogEntry?, now: BrokerTime
    ) -> [LogEntry] {
        guard viewer != user, let state = privacy[user] else { return entries }
        let sight = state.sight(viewer)
        let masked = { (entry: LogEntry) -> LogEntry in
            var entry = entry
            if !sight.lastSeen { entry.record = withoutLastSeen(entry.record) }
            return entry
        }
        guard !sight.status else { return entries.map(masked) }
        let view = view(of: user, for: viewer, now: now)
        guard view.seq > 0 else { return [] }
        let until = view.offset ?? 0
        var seen = entries.filter { $0.offset <= until }.map(masked)
        // One already offline when sight was lost needs nothing more: its view is its last record.
        if let lastSeen, lastSeen.offset == until, lastSeen.record.status.isAvailable {
            // The frozen record's `since` is the moment sight was lost (the view may have it masked).
            let time = (state.frozen[viewer] ?? state.mask)?.since ?? lastSeen.time
            seen.append(
                LogEntry(offset: max(until + 1, UInt64(max(0, time.milliseconds)) * 1_000), time: time, record: view))
        }
        return seen
    }

    /// `truth`, the record of a user at some past moment as the log tells it, as `viewer` may read it now: the
    /// record then if the viewer saw it, else the viewer's view (a user hidden later reads as the bye of the
    /// moment sight was lost), `last_seen` and `since` null where the policy hides them.
    public func recordAt(_ truth: PresenceRecord, for viewer: UserID, now: BrokerTime) -> PresenceRecord {
        guard viewer != truth.user, let state = privacy[truth.user] else { return truth }
        let sight = state.sight(viewer)
        var record = truth
        if !sight.status {
            let view = view(of: truth.user, for: viewer, now: now)
            if view.seq == 0 || (truth.offset ?? 0) > (view.offset ?? 0) { record = view }
        }
        return sight.lastSeen ? record : withoutLastSeen(record)
    }
}
