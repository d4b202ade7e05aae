/// Users' records: how sessions add up to one record, and reading them.
extension PresenceCore {
    /// The record of `user` as of `now`, as everyone sees it: `invisible` sessions left out as if they did not
    /// exist.
    public func record(of user: UserID, now: BrokerTime) -> PresenceRecord {
        guard let state = users[user] else { return .unknown(user) }
        return PresenceRecord(
            user: user, status: state.status, text: state.text, since: state.since,
            lastSeen: state.status.isAvailable ? now : state.lastSeen, sessions: state.publishedSessions,
            seq: state.seq, reason: state.status.isAvailable ? nil : state.reason,
            offset: state.offset > 0 ? state.offset : nil)
    }

    /// The record of `user` as the user's own sessions and operators see it: the sessions count every live session,
    /// and a user whose only live sessions are `invisible` shows as `invisible`, last seen now. Never published.
    public func trueRecord(of user: UserID, now: BrokerTime) -> PresenceRecord {
        var record = record(of: user, now: now)
        guard let state = users[user] else { return record }
        let live = state.sessions.compactMap { sessions[$0] }.filter { !$0.isPlaceholder }
        record.sessions = state.sessions.count
        guard !record.status.isAvailable,
            let hidden = live.filter({ $0.status == .invisible }).max(by: { $0.statusOrder < $1.statusOrder })
        else { return record }
        record.status = .invisible
        record.text = hidden.text
        record.lastSeen = now
        record.reason = nil
        return record
    }

    /// Whether `connection` carries a live session of `user`: such a connection is the user's own and may see the
    /// truth about them (``trueRecord(of:now:)``).
    public func connection(_ connection: ConnectionID, carriesSessionOf user: UserID) -> Bool {
        connections[connection]?.contains { sessions[$0]?.user == user } ?? false
    }

    /// The records of up to ``Configuration/maxQueryUsers`` users, each once, in the order first named. The users
    /// for whom `seesTruth` says yes get their ``trueRecord(of:now:)``, the others their public record.
    /// With `viewer` (a `user` key or token), every other user is answered as that viewer sees them
    /// (``view(of:for:now:)``, docs/privacy.md).
    public func query(
        _ users: [UserID], now: BrokerTime, viewer: UserID? = nil, seesTruth: (UserID) -> Bool = { _ in false }
    ) -> Result<[PresenceRecord], PresenceError> {
        guard users.count <= configuration.maxQueryUsers else {
            return .failure(
                PresenceError(.limit, "query names \(users.count) users; at most \(configuration.maxQueryUsers)"))
        }
        var seen = Set<UserID>()
        return .success(
            users.filter { seen.insert($0).inserted }.map {
                if seesTruth($0) { return trueRecord(of: $0, now: now) }
                if let viewer { return view(of: $0, for: viewer, now: now) }
                return record(of: $0, now: now)
            })
    }

    /// Recomputes the record of `user` from its sessions. Returns it if it changed (with a new `seq`), or nothing.
    /// `reason` says why, in case the user stops being available. A change from the cluster's store carries its
    /// `stamp`: the record takes its time and its seq (at least), so that every node makes the same record; `now`
    /// (this broker's clock) then only schedules group batches.
    mutating func refresh(
        _ user: UserID, now: BrokerTime, reason: OfflineReason, stamp: Stamp? = nil
    ) -> [PresenceRecord] {
        guard var state = users[user] else { return [] }
        var winner: Session?
        var visible = 0  // an invisible session is left out as if it did not exist
        for id in state.sessions {
            guard let session = sessions[id], session.status != .invisible else { continue }
            visible += 1
            if let best = winner,
                session.status < best.status
                    || (session.status == best.status && session.statusOrder < best.statusOrder)
            {
                continue
            }
            winner = session
        }
        let status = winner?.status ?? .offline
        let text = winner?.text

        let statusChanged = status != state.status || !sameBytes(text, state.text)
        guard statusChanged || visible != state.publishedSessions else { return [] }
        let at = stamp?.time ?? now
        if statusChanged || state.since == nil { state.since = at }
        if status.isAvailable || state.status.isAvailable { state.lastSeen = at }
        if state.status.isAvailable && !status.isAvailable { state.reason = reason }
        let previous = state.status
        if previous.isAvailable != status.isAvailable { availableUserCount += status.isAvailable ? 1 : -1 }
        if !privacy.isEmpty, privacy[user]?.concealed == true {
            concealedAvailable += (status.isAvailable ? 1 : 0) - (previous.isAvailable ? 1 : 0)
            concealedSessions += visible - state.publishedSessions
        }
        state.status = status
        state.text = text
        state.publishedSessions = visible
        // A second change of one stamp (a cluster's revision that changes the user twice, or a snapshot's load)
        // keeps the stamp's seq: the broker publishes the user's last record of a revision only.
        state.seq =
            stamp.map { $0.seq == state.seq ? $0.seq : max(state.seq + 1, $0.seq) }
            ?? nextSeq(after: state.seq, now: now)
        // Decided by the log's own offsets, not by `seq`: a privacy choice of the same revision may have taken the
        // seq without making an entry.
        let again = stamp?.revisionOffsets?.contains(state.offset) ?? false
        if logsTransitions, !again {
            if let offset = stamp?.offset {
                state.offset = stampedOffset(offset)
            } else {
                state.offset = nextOffset(now: now)
            }
        }
        users[user] = state
        if tracksChanges { changedUsers.insert(user) }
        noteMemberChange(user, from: previous, to: status, now: now)
        let published = record(of: user, now: at)
        if logsTransitions { logTransition(LogEntry(offset: state.offset, time: at, record: published), again: again) }
        return [published]
    }

    /// `seq` grows by one per change and never falls behind the broker's clock in microseconds, so it keeps
    /// growing across restarts even when nothing was persisted.
    func nextSeq(after seq: UInt64, now: BrokerTime) -> UInt64 {
        max(seq + 1, UInt64(max(0, now.milliseconds)) * 1_000)
    }
}

/// Whether two texts are the same bytes. The protocol compares text by bytes; Swift's `String ==` compares by
/// canonical equivalence, so `"é"` and `"e\u{301}"` would pass for the same text and a change between them be lost.
func sameBytes(_ a: String?, _ b: String?) -> Bool {
    switch (a, b) {
    case (nil, nil): true
    case (var a?, var b?): a.withUTF8 { x in b.withUTF8 { y in x.count == y.count && x.elementsEqual(y) } }
    default: false
    }
}
