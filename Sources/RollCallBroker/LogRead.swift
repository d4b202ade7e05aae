import DequeModule
import RollCallCore
import RollCallStore
import RollCallWire

/// The loop's side of the presence log (docs/history.md): the core numbers transitions; the loop hands them to the
/// store's writer every round, and keeps them here until they are in the file, so that a read always sees
/// everything published before it. The reads themselves run on the log's reader thread (LogReader.swift).
struct LoopHistory {
    let log: PresenceLog
    private(set) var epoch: String
    /// Transitions handed to the writer and not known to be in the file yet, in offset order.
    var unwritten = Deque<LogEntry>()
    /// The thread that reads the file for `history`, `events` and `query` with `at`; `nil` in tests without one.
    let reader: LogReader?
    /// The reads in flight and the connections waiting for room (LogReadSlots).
    var slots = LogReadSlots()
    /// The positions of the WebSocket resumes being read: ``unwritten`` keeps every transition above the lowest, so
    /// that what is published while the file is read, and written meanwhile, is still here when the resume is
    /// answered (``resumed(after:through:topics:)``).
    private(set) var resumesReading: [UInt64] = []
    /// The highest offset dropped from ``unwritten`` before it was written (the store could not write), or below a
    /// cluster node's floor (LogFloor): a cursor below it cannot be continued whole.
    private(set) var droppedThrough: UInt64 = 0

    init(log: PresenceLog, epoch: String, reader: LogReader? = nil) {
        self.log = log
        self.epoch = epoch
        self.reader = reader
    }

    /// The log started over under `epoch`: what waited for the writer is gone with the old log.
    mutating func restart(epoch: String) {
        self.epoch = epoch
        unwritten.removeAll()
    }

    /// A cluster node's log no longer continues cursors below `through` (LogStart, LogFloor).
    mutating func raiseFloor(through: UInt64) {
        droppedThrough = max(droppedThrough, through)
    }

    /// Forgets the transitions the writer has written (at or below `committed`), but those a resume being read still
    /// needs.
    mutating func forget(through committed: UInt64) {
        let through = resumesReading.min().map { min($0, committed) } ?? committed
        while let first = unwritten.first, first.offset <= through { unwritten.removeFirst() }
    }

    /// Drops the oldest transitions past `limit` while the store cannot write: those above `committed` are lost from
    /// the log (those at or below it were kept for a resume, and are in the file).
    mutating func dropUnwritten(past limit: Int, committed: UInt64) {
        guard unwritten.count > limit else { return }
        let last = unwritten[unwritten.count - limit - 1].offset
        if last > committed { droppedThrough = max(droppedThrough, last) }
        unwritten.removeFirst(unwritten.count - limit)
    }

    /// A resume from `position` is read on the reader thread: keep what is published from now on.
    mutating func beginResume(at position: UInt64) { resumesReading.append(position) }

    /// The resume from `position` is answered, or was not read after all: what is published no longer waits for it.
    mutating func endResume(at position: UInt64) {
        if let index = resumesReading.firstIndex(of: position) { resumesReading.remove(at: index) }
    }

    /// The resume read from `position` is back: the transitions of `topics` published after `position`, through
    /// `visible` (what is out now), which it must deliver after what it read; `nil` if they are no longer all here.
    mutating func resumed(after position: UInt64, through visible: UInt64, topics: [Topic]) -> [LogEntry]? {
        endResume(at: position)
        guard droppedThrough <= position else { return nil }
        return pending(above: position, through: visible, where: LogRead.includes(topics))
    }

    /// The transitions not in the file as of `committed`, up to `visible` (PublicationHold.swift), that `include`
    /// keeps, oldest first.
    func pending(above committed: UInt64, through visible: UInt64, where include: (LogEntry) -> Bool) -> [LogEntry] {
        unwritten.filter { $0.offset > committed && $0.offset <= visible && include($0) }
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

/// One read of the presence log, in three steps: prepared on the loop (``prepare(_:history:committed:logOffset:now:viewer:core:)``:
/// what the loop alone knows, taken at the moment of the request), run on the reader thread (``fetch(from:)``:
/// the file, nothing of the loop's), and answered on the loop (``reply(_:core:now:)``: privacy, judged with the
/// core as it is at the moment of the reply). Pure apart from the file: tested without threads.
struct LogRead: Sendable {
    enum Kind: Sendable {
        case events(after: UInt64, limit: Int)
        /// With the offset of the entry the reader fetches for a viewer that lost sight of the user (its
        /// `lastSeen`), when that entry is in the file.
        case history(HistoryQuery, lastSeen: UInt64?)
        case at(users: [UserID], at: BrokerTime)
        /// A WebSocket `subscribe` with `after`: the transitions of `topics` after it, at most one page in all.
        case resume(topics: [Topic], after: UInt64)
    }

    let kind: Kind
    /// The highest offset in the file at the request: rows above it come from `pending`, so none is missing or twice.
    let committed: UInt64
    /// The transitions of the read not in the file at the request (taken from ``LoopHistory/unwritten``).
    let pending: [LogEntry]
    /// A viewer's `lastSeen` entry when it was not in the file at the request.
    let lastSeenPending: LogEntry?
    /// The cursor the reader checks against the file's trimming.
    let cursor: UInt64?
    /// Where the log stood at the request: the reply's position, whatever was published while the file was read.
    let position: LogPosition
    let now: BrokerTime
    let viewer: UserID?

    /// What the reader found.
    struct Rows: Sendable {
        var entries: [LogEntry] = []
        var lastSeen: LogEntry?
        var latest: [UserID: LogEntry] = [:]
    }

    /// Prepares `request` (a `history`, `events` or `query` with `at`) with what the loop holds now, or refuses it
    /// (a cursor of another epoch or ahead of the log, `at` ahead of the clock). `logOffset` is the latest offset that
    /// is out (``BrokerMachine/visibleLogOffset``), `committed` the file's, at most that: the read shows no further.
    static func prepare(
        _ request: Request, history: LoopHistory, committed: UInt64, logOffset: UInt64, now: BrokerTime,
        viewer: UserID?, core: PresenceCore
    ) -> Result<LogRead, PresenceError> {
        let position = LogPosition(epoch: history.epoch, offset: logOffset)
        let read = { (kind: Kind, pending: [LogEntry], lastSeen: LogEntry?, cursor: UInt64?) in
            LogRead(
                kind: kind, committed: committed, pending: pending, lastSeenPending: lastSeen, cursor: cursor,
                position: position, now: now, viewer: viewer)
        }
        switch request {
        case .events(let after, let epoch, let limit):
            if let refusal = refusal(of: after, epoch: epoch, history: history, logOffset: logOffset) {
                return .failure(refusal)
            }
            // Older entries come first from the file: only the first `limit` of these can make the page.
            let pending = history.pending(above: max(after, committed), through: logOffset) { _ in true }.prefix(limit)
            return .success(read(.events(after: after, limit: limit), Array(pending), nil, nil))
        case .history(let query):
            let pending = history.pending(above: max(query.after ?? 0, committed), through: logOffset) { entry in
                entry.record.user == query.user && within(query)(entry)
            }
            var lastSeen: (offset: UInt64, entry: LogEntry?)?
            if let viewer, let offset = core.lostSight(of: query.user, by: viewer, now: now), offset > 0 {
                let unwritten = history.pending(above: committed, through: logOffset) {
                    $0.offset == offset && $0.record.user == query.user
                }
                lastSeen = offset > committed ? (0, unwritten.first) : (offset, nil)
            }
            let fetch = lastSeen.flatMap { $0.offset > 0 ? $0.offset : nil }
            return .success(read(.history(query, lastSeen: fetch), pending, lastSeen?.entry, nil))
        case .queryAt(let users, let at):
            guard at <= now else {
                return .failure(PresenceError(.badRequest, "field 'at' is ahead of the broker's clock (\(now))"))
            }
            var seen = Set<UserID>()
            let distinct = users.filter { seen.insert($0).inserted }
            let pending = history.pending(above: committed, through: logOffset) {
                $0.time <= at && seen.contains($0.record.user)
            }
            return .success(read(.at(users: distinct, at: at), pending, nil, nil))
        default:
            return .failure(PresenceError(.badRequest, "\(request.op) does not read the presence log"))
        }
    }

    /// Refuses a cursor this log cannot continue, as far as the loop can tell: another epoch, or ahead of the log
    /// (the file's trimming is the reader's to check, ``fetch(from:)``).
    static func refusal(of after: UInt64, epoch: String?, history: LoopHistory, logOffset: UInt64) -> PresenceError? {
        if let epoch, epoch != history.epoch {
            return PresenceError(
                .snapshotRequired,
                "log_epoch '\(epoch)' is not this log's (\(history.epoch)): take ping's offset, query, then "
                    + "continue from it")
        }
        if after < history.droppedThrough { return droppedTransitions(after: after) }
        if after > logOffset {
            return PresenceError(
                .snapshotRequired,
                "offset \(after) is ahead of this log (at \(logOffset)): take ping's offset, query, then "
                    + "continue from it")
        }
        return nil
    }

    /// Refuses a cursor the file no longer continues: its entries were trimmed away.
    static func checkTrimmed(_ after: UInt64, log: PresenceLog) throws {
        let state = try log.state()
        if after < state.trimmedThrough {
            throw PresenceError(
                .snapshotRequired,
                "offset \(after) is older than the log keeps (trimmed through \(state.trimmedThrough)): take ping's offset, query, then "
                    + "continue from it")
        }
    }

    /// Prepares a WebSocket resume (`subscribe` with `after`) of `topics`, or refuses it (another epoch, a cursor
    /// ahead of the log): what is not in the file yet comes from the loop now, the rest from the reader.
    static func prepareResume(
        of topics: [Topic], after: UInt64, logEpoch: String?, history: LoopHistory, committed: UInt64,
        logOffset: UInt64, now: BrokerTime
    ) -> Result<LogRead, PresenceError> {
        if let refusal = refusal(of: after, epoch: logEpoch, history: history, logOffset: logOffset) {
            return .failure(refusal)
        }
        let pending = history.pending(above: max(after, committed), through: logOffset, where: includes(topics))
        return .success(
            LogRead(
                kind: .resume(topics: topics, after: after), committed: committed, pending: pending,
                lastSeenPending: nil, cursor: after, position: LogPosition(epoch: history.epoch, offset: logOffset),
                now: now, viewer: nil))
    }

    /// Whether a transition belongs to one of `topics` (`presence/` takes every user's).
    static func includes(_ topics: [Topic]) -> (LogEntry) -> Bool {
        if topics.contains(.allPresence) { return { _ in true } }
        var users = Set<UserID>()
        for case .presence(let user) in topics { users.insert(user) }
        return { users.contains($0.record.user) }
    }

    /// A cursor across a hole in the log is refused: transitions dropped while the store could not write, or a
    /// cluster node's snapshot of etcd in place of its history.
    static func droppedTransitions(after: UInt64) -> PresenceError {
        PresenceError(
            .snapshotRequired,
            "the log has a hole after offset \(after) (the store could not write, or this node of a cluster loaded a "
                + "snapshot): take ping's offset, query (or subscribe without 'after'), then continue from there")
    }

    /// A resume that owes more than a page is refused: the client reads the current state instead.
    static func tooManyMissed(after: UInt64) -> PresenceError {
        PresenceError(
            .snapshotRequired,
            "more than \(HistoryQuery.maxLimit) transitions of these topics came after offset \(after): subscribe "
                + "without 'after' (the current records come at once) and continue from there")
    }

    /// Whether an entry is within a `history` query's bounds.
    static func within(_ query: HistoryQuery) -> (LogEntry) -> Bool {
        { entry in
            entry.offset > (query.after ?? 0) && query.from.map { entry.time >= $0 } ?? true
                && query.to.map { entry.time <= $0 } ?? true
        }
    }

    /// Reads the file, on the reader thread: the rows at or below ``committed``, then the pending ones.
    func fetch(from log: PresenceLog) throws -> Rows {
        var rows = Rows()
        switch kind {
        case .events(let after, let limit):
            try Self.checkTrimmed(after, log: log)
            rows.entries = try log.events(after: after, limit: limit).filter { $0.offset <= committed } + pending
        case .history(let query, let lastSeen):
            rows.entries =
                try log.history(of: query.user, from: query.from, to: query.to, after: query.after, limit: query.limit)
                .filter { $0.offset <= committed } + pending
            rows.lastSeen = try lastSeen.flatMap { offset in
                try log.history(of: query.user, from: nil, to: nil, after: offset - 1, limit: 1)
                    .first { $0.offset == offset }
            }
        case .resume(let topics, let after):
            try Self.checkTrimmed(after, log: log)
            let cap = HistoryQuery.maxLimit
            if topics.contains(.allPresence) {
                rows.entries = try log.events(after: after, limit: cap + 1).filter { $0.offset <= committed }
            } else {
                var users = Set<UserID>()
                for case .presence(let user) in topics { users.insert(user) }
                // One page at most in all, not one per user: past it the resume is refused anyway.
                for user in users {
                    let budget = cap + 1 - rows.entries.count
                    guard budget > 0 else { break }
                    rows.entries += try log.history(of: user, from: nil, to: nil, after: after, limit: budget)
                        .filter { $0.offset <= committed }
                }
                rows.entries.sort { $0.offset < $1.offset }
            }
            rows.entries += pending
            guard rows.entries.count <= cap else { throw Self.tooManyMissed(after: after) }
        case .at(let users, let at):
            let state = try log.state()
            guard at >= state.horizon else {
                throw PresenceError(
                    .snapshotRequired,
                    "the log tells no state before \(state.horizon) (its start or its retention); asked for \(at)")
            }
            rows.latest = try log.latest(of: users, at: at, through: committed)
            for entry in pending { rows.latest[entry.record.user] = entry }  // in offset order: the last one wins
        }
        return rows
    }

    /// The reply, on the loop: for a viewer (a user key or token), as its user may see the users now
    /// (docs/privacy.md), with the core as it is at the reply.
    func reply(_ rows: Rows, core: PresenceCore, now: BrokerTime) -> Reply {
        switch kind {
        case .events(_, let limit):
            return .log(page("events", rows.entries, limit: limit))
        case .history(let query, _):
            var entries = rows.entries
            if let viewer {
                entries = core.history(
                    entries, of: query.user, for: viewer, lastSeen: rows.lastSeen ?? lastSeenPending, now: now
                ).filter(Self.within(query))
            }
            return .log(page("history", entries, limit: query.limit))
        case .resume:
            return .done  // answered by the loop (EventLoop.finishResume), which subscribes and sends the rows
        case .at(let users, _):
            return .query(
                users.map { user in
                    let truth = rows.latest[user]?.record ?? .unknown(user)
                    return viewer.map { core.recordAt(truth, for: $0, now: now) } ?? truth
                })
        }
    }

    /// A page of at most `limit` entries, with `next` when it is full.
    private func page(_ name: String, _ entries: [LogEntry], limit: Int) -> LogPage {
        let page = Array(entries.prefix(limit))
        return LogPage(
            name: name, entries: page, next: page.count == limit ? page.last?.offset : nil, position: position)
    }
}

extension Result where Failure == PresenceError {
    /// The error's code, for the request counters; `nil` for a success.
    var failureCode: ErrorCode? {
        if case .failure(let error) = self { error.code } else { nil }
    }
}
