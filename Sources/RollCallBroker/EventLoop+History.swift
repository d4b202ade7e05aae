import DequeModule
import RollCallCore
import RollCallSecurity
import RollCallStore
import RollCallWire

/// The loop's side of the presence log (docs/history.md): the core numbers transitions; the loop hands them to the
/// store's writer every round, and answers `history`, `events` and `query` with `at` from the file plus the
/// transitions the writer has not written yet, so that a read always sees everything published before it.
struct LoopHistory {
    let log: PresenceLog
    let epoch: String
    /// Transitions handed to the writer and not known to be in the file yet, in offset order.
    var unwritten = Deque<LogEntry>()

    /// Forgets the transitions the writer has written (at or below `committed`).
    mutating func forget(through committed: UInt64) {
        while let first = unwritten.first, first.offset <= committed { unwritten.removeFirst() }
    }

    /// The transitions not in the file as of `committed` that `include` keeps, oldest first.
    func pending(above committed: UInt64, where include: (LogEntry) -> Bool) -> [LogEntry] {
        unwritten.filter { $0.offset > committed && include($0) }
    }
}

extension StoreBatch {
    /// The batch with `entries` appended to its log.
    func appendingLog(_ entries: [LogEntry]) -> StoreBatch {
        var batch = self
        batch.log += entries
        return batch
    }
}

extension EventLoop {
    /// Takes the core's new transitions, keeping them for reads until the writer has written them. The caller hands
    /// them to the writer: taken and not written, they would be lost from the log.
    func takeTransitions() -> [LogEntry] {
        guard history != nil, machine.core.hasTransitions else { return [] }
        let entries = machine.core.takeTransitions()
        history?.unwritten.append(contentsOf: entries)
        return entries
    }

    /// Hands this round's transitions to the writer.
    func writeTransitions(now: BrokerTime) {
        guard let writer else { return }
        writer.note(time: now)
        history?.forget(through: writer.committedOffset)
        // The writer drops the oldest past the same bound while the store cannot write (and the log then starts over).
        if let count = history?.unwritten.count, count > writer.maxUnwrittenLog {
            history?.unwritten.removeFirst(count - writer.maxUnwrittenLog)
        }
        let entries = takeTransitions()
        guard !entries.isEmpty else { return }
        writer.enqueue(StoreBatch(brokerTime: now, log: entries))
    }

    /// The log started over under `epoch` (the writer dropped transitions while the store could not write): cursors
    /// of the old epoch are refused from now on.
    func adoptLog(epoch: String) {
        guard let old = history else { return }
        history = LoopHistory(log: old.log, epoch: epoch)
        machine.logEpoch = epoch
    }

    /// Answers a request that reads the log, after the same authorization as every request.
    func readLog(_ request: Request, access: Access) -> Result<Reply, PresenceError> {
        if let refusal = Authorization.refusal(of: request, by: access, owner: { _ in nil }) {
            return .failure(refusal)
        }
        guard history != nil, let writer else {
            return .failure(
                PresenceError(
                    .noHistory,
                    "this broker keeps no presence log (--history-retention-ms 0, --ephemeral, or a cluster node)"))
        }
        let now = clock.now()
        // Everything published so far is in the file or in `unwritten` (handed to the writer here, if this round's
        // were not yet); `committed` is read before the file, so rows above it come from `unwritten`: no hole.
        writeTransitions(now: now)
        let committed = writer.committedOffset
        do {
            switch request {
            case .events(let after, let epoch, let limit):
                try checkCursor(after, epoch: epoch)
                let written = try history!.log.events(after: after, limit: limit).filter { $0.offset <= committed }
                let pending = history!.pending(above: max(after, committed)) { _ in true }
                return .success(.log(page("events", written + pending, limit: limit)))
            case .history(let query):
                let within = { (entry: LogEntry) in
                    entry.offset > (query.after ?? 0) && query.from.map { entry.time >= $0 } ?? true
                        && query.to.map { entry.time <= $0 } ?? true
                }
                let written = try history!.log.history(
                    of: query.user, from: query.from, to: query.to, after: query.after, limit: query.limit
                ).filter { $0.offset <= committed }
                let pending = history!.pending(above: max(query.after ?? 0, committed)) { entry in
                    entry.record.user == query.user && within(entry)
                }
                var entries = written + pending
                // A user key or token reads the log as its user may see the user (docs/privacy.md).
                if let viewer = access.viewer {
                    let core = machine.published
                    let lastSeen = try core.lostSight(of: query.user, by: viewer, now: now).flatMap {
                        try entry(of: query.user, at: $0, committed: committed)
                    }
                    entries = core.history(entries, of: query.user, for: viewer, lastSeen: lastSeen, now: now)
                        .filter(within)
                }
                return .success(.log(page("history", entries, limit: query.limit)))
            case .queryAt(let users, let at):
                return try recordsAt(users, at: at, now: now, committed: committed, viewer: access.viewer)
            default:
                return .failure(PresenceError(.badRequest, "\(request.op) does not read the presence log"))
            }
        } catch let error as PresenceError {
            return .failure(error)
        } catch {
            logger.error("reading the presence log failed", metadata: ["error": "\(error)"])
            return .failure(PresenceError(.noHistory, "the presence log cannot be read now: \(error)"))
        }
    }

    /// A WebSocket `subscribe` with `after`: the transitions of the presence topics after that offset go out after
    /// the reply, in offset order, then the live ones; nothing in between can come first, as all of it happens in
    /// this one call on the loop. Refused (and nothing subscribed) when the log cannot continue from `after`, or
    /// when more than a page (``HistoryQuery/maxLimit``) was missed: then query and subscribe again.
    func resume(_ id: ConnectionID, to topics: [Topic], after: UInt64, logEpoch: String?, requestID: JSON?) {
        switch missedTransitions(of: topics, after: after, logEpoch: logEpoch) {
        case .success(let missed):
            subscribe(id, to: topics, requestID: requestID, missed: missed)
        case .failure(let error):
            metrics.request(nil, failed: error.code)
            deliver(Codec.encodeReply(id: requestID, .failure(error)), to: id)
        }
    }

    private func missedTransitions(of topics: [Topic], after: UInt64, logEpoch: String?) -> Result<
        [LogEntry], PresenceError
    > {
        guard self.history != nil, let writer else {
            return .failure(
                PresenceError(.noHistory, "this broker keeps no presence log, so a subscription cannot resume"))
        }
        // This round's transitions join `unwritten` first: a copy of the history taken before would miss them.
        writeTransitions(now: clock.now())
        guard let history else { return .success([]) }
        let committed = writer.committedOffset
        let cap = HistoryQuery.maxLimit
        do {
            try checkCursor(after, epoch: logEpoch)
            var missed: [LogEntry]
            if topics.contains(.allPresence) {
                missed = try history.log.events(after: after, limit: cap + 1).filter { $0.offset <= committed }
                missed += history.pending(above: max(after, committed)) { _ in true }
            } else {
                var users = Set<UserID>()
                for case .presence(let user) in topics { users.insert(user) }
                missed = []
                for user in users {
                    missed += try history.log.history(of: user, from: nil, to: nil, after: after, limit: cap + 1)
                        .filter { $0.offset <= committed }
                }
                missed += history.pending(above: max(after, committed)) { users.contains($0.record.user) }
                missed.sort { $0.offset < $1.offset }
            }
            guard missed.count <= cap else {
                throw PresenceError(
                    .snapshotRequired,
                    "more than \(cap) transitions of these topics came after offset \(after): subscribe without "
                        + "'after' (the current records come at once) and continue from there")
            }
            return .success(missed)
        } catch let error as PresenceError {
            return .failure(error)
        } catch {
            logger.error("reading the presence log failed", metadata: ["error": "\(error)"])
            return .failure(PresenceError(.noHistory, "the presence log cannot be read now: \(error)"))
        }
    }

    /// Refuses a cursor this log cannot continue: another epoch, trimmed away, or ahead of the log.
    private func checkCursor(_ after: UInt64, epoch: String?) throws {
        guard let history else { return }
        if let epoch, epoch != history.epoch {
            throw PresenceError(
                .snapshotRequired,
                "log_epoch '\(epoch)' is not this log's (\(history.epoch)): take ping's offset, query, then "
                    + "continue from it")
        }
        let state = try history.log.state()
        if after < state.trimmedThrough {
            throw PresenceError(
                .snapshotRequired,
                "offset \(after) is older than the log keeps (trimmed through \(state.trimmedThrough)): take ping's offset, query, then "
                    + "continue from it")
        }
        if after > machine.core.logOffset {
            throw PresenceError(
                .snapshotRequired,
                "offset \(after) is ahead of this log (at \(machine.core.logOffset)): take ping's offset, query, then "
                    + "continue from it")
        }
    }

    /// A page of at most `limit` entries, with `next` when it is full.
    private func page(_ name: String, _ entries: [LogEntry], limit: Int) -> LogPage {
        let page = Array(entries.prefix(limit))
        return LogPage(
            name: name, entries: page, next: page.count == limit ? page.last?.offset : nil,
            position: LogPosition(epoch: history?.epoch ?? "", offset: machine.core.logOffset))
    }

    /// `user`'s entry at `offset`, from the file or from what waits for the writer.
    private func entry(of user: UserID, at offset: UInt64, committed: UInt64) throws -> LogEntry? {
        guard let history, offset > 0 else { return nil }
        if offset > committed {
            return history.pending(above: committed) { $0.offset == offset && $0.record.user == user }.first
        }
        return try history.log.history(of: user, from: nil, to: nil, after: offset - 1, limit: 1)
            .first { $0.offset == offset }
    }

    /// `query` with `at`: each user's record as the log tells it at that time; for a `viewer` (a user key or
    /// token), as its user may see each one now (docs/privacy.md).
    private func recordsAt(
        _ users: [UserID], at: BrokerTime, now: BrokerTime, committed: UInt64, viewer: UserID?
    ) throws -> Result<Reply, PresenceError> {
        guard let history else { return .failure(PresenceError(.noHistory, "this broker keeps no presence log")) }
        guard at <= now else {
            return .failure(PresenceError(.badRequest, "field 'at' is ahead of the broker's clock (\(now))"))
        }
        let state = try history.log.state()
        guard at >= state.horizon else {
            return .failure(
                PresenceError(
                    .snapshotRequired,
                    "the log tells no state before \(state.horizon) (its start or its retention); asked for \(at)"))
        }
        var seen = Set<UserID>()
        let distinct = users.filter { seen.insert($0).inserted }
        var latest = try history.log.latest(of: distinct, at: at)
        for entry in history.pending(above: committed, where: { $0.time <= at }) {
            latest[entry.record.user] = entry  // in offset order: the last one wins
        }
        let core = machine.published
        return .success(
            .query(
                distinct.map { user in
                    let truth = latest[user]?.record ?? .unknown(user)
                    return viewer.map { core.recordAt(truth, for: $0, now: now) } ?? truth
                }))
    }
}
