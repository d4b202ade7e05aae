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
    /// Takes the core's new transitions, keeping them for reads until the writer has written them.
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
        let entries = takeTransitions()
        guard !entries.isEmpty else { return }
        writer.enqueue(StoreBatch(brokerTime: now, log: entries))
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
        // Everything published so far is in the file or in `unwritten`; `committed` is read before the file, so
        // rows above it are taken from `unwritten` and a page has no hole.
        _ = takeTransitions()
        let committed = writer.committedOffset
        do {
            switch request {
            case .events(let after, let epoch, let limit):
                try checkCursor(after, epoch: epoch)
                let written = try history!.log.events(after: after, limit: limit).filter { $0.offset <= committed }
                let pending = history!.pending(above: max(after, committed)) { _ in true }
                return .success(.log(page("events", written + pending, limit: limit)))
            case .history(let query):
                let written = try history!.log.history(
                    of: query.user, from: query.from, to: query.to, after: query.after, limit: query.limit
                ).filter { $0.offset <= committed }
                let pending = history!.pending(above: max(query.after ?? 0, committed)) { entry in
                    entry.record.user == query.user && query.from.map { entry.time >= $0 } ?? true
                        && query.to.map { entry.time <= $0 } ?? true
                }
                return .success(.log(page("history", written + pending, limit: query.limit)))
            case .queryAt(let users, let at):
                return try recordsAt(users, at: at, now: now, committed: committed)
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

    /// Refuses a cursor this log cannot continue: another epoch, trimmed away, or ahead of the log.
    private func checkCursor(_ after: UInt64, epoch: String?) throws {
        guard let history else { return }
        if let epoch, epoch != history.epoch {
            throw PresenceError(
                .snapshotRequired,
                "log_epoch '\(epoch)' is not this log's (\(history.epoch)): query, then continue from "
                    + "ping's offset")
        }
        let state = try history.log.state()
        if after < state.trimmedThrough {
            throw PresenceError(
                .snapshotRequired,
                "offset \(after) is older than the log keeps (trimmed through \(state.trimmedThrough)): query, then "
                    + "continue from ping's offset")
        }
        if after > machine.core.logOffset {
            throw PresenceError(
                .snapshotRequired,
                "offset \(after) is ahead of this log (at \(machine.core.logOffset)): query, then continue from "
                    + "ping's offset")
        }
    }

    /// A page of at most `limit` entries, with `next` when it is full.
    private func page(_ name: String, _ entries: [LogEntry], limit: Int) -> LogPage {
        let page = Array(entries.prefix(limit))
        return LogPage(
            name: name, entries: page, next: page.count == limit ? page.last?.offset : nil,
            position: LogPosition(epoch: history?.epoch ?? "", offset: machine.core.logOffset))
    }

    /// `query` with `at`: each user's record as the log tells it at that time.
    private func recordsAt(_ users: [UserID], at: BrokerTime, now: BrokerTime, committed: UInt64) throws
        -> Result<Reply, PresenceError>
    {
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
        return .success(.query(distinct.map { latest[$0]?.record ?? .unknown($0) }))
    }
}
