import GRDB
import RollCallCore

/// Where the presence log stands (docs/history.md).
public struct LogState: Sendable, Equatable {
    /// Names this log: new whenever it is lost with its data or started again; empty when no log is kept.
    public var epoch: String
    /// The highest offset the log, or any user's record, holds: the broker continues above it.
    public var lastOffset: UInt64
    /// Entries at or below this offset may have been trimmed: an `events` cursor below it cannot continue.
    public var trimmedThrough: UInt64
    /// The earliest broker time whose state the log still tells: the log's start, or the retention's cut-off.
    public var horizon: BrokerTime

    public init(epoch: String, lastOffset: UInt64, trimmedThrough: UInt64, horizon: BrokerTime) {
        self.epoch = epoch
        self.lastOffset = lastOffset
        self.trimmedThrough = trimmedThrough
        self.horizon = horizon
    }
}

/// The presence log in the store's SQLite file, read on a connection of its own: the log's readers (the event loop's
/// `history`, `events` and `query` with `at`; webhook delivery) never wait behind the store's writer, as WAL allows.
///
/// Entries are written by the store's writer in batches (``StoreBatch/log``) and trimmed by it
/// (``SQLiteStore/trimLog(before:maxRows:)``); this type only reads, apart from webhook cursors.
public final class PresenceLog: Sendable {
    let database: DatabaseQueue
    /// The database file.
    public let path: String

    /// Opens the log of the store in `directory` (made by ``SQLiteStore``, which must be opened first); with
    /// `readOnly`, on a connection that cannot write (webhook cursors then cannot be saved).
    public init(directory: String, readOnly: Bool = false) throws {
        path = (directory.hasSuffix("/") ? directory : directory + "/") + "rollcall.sqlite3"
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        configuration.readonly = readOnly
        let path = path
        database = try SQLiteStore.sqlite(.open, path: path) {
            try DatabaseQueue(path: path, configuration: configuration)
        }
    }

    /// Another connection to the same file, read-only: a reader thread of its own never waits behind this one's
    /// users (GRDB serializes the uses of one connection; WAL lets connections read side by side).
    public func readOnlyConnection() throws -> PresenceLog {
        try PresenceLog(directory: String(path.dropLast("rollcall.sqlite3".count)), readOnly: true)
    }

    /// Where the log stands now; `lastOffset` only with `withLastOffset` (it reads every user's row).
    public func state(withLastOffset: Bool = false) throws -> LogState {
        try read { db in try Self.state(db, withLastOffset: withLastOffset) }
    }

    static func state(_ db: Database, withLastOffset: Bool = true) throws -> LogState {
        guard
            let row = try Row.fetchOne(
                db, sql: "SELECT epoch, started, trimmed_through, trimmed_before FROM log_info WHERE id = 1")
        else { return LogState(epoch: "", lastOffset: 0, trimmedThrough: 0, horizon: BrokerTime(milliseconds: 0)) }
        let logged = try Int64.fetchOne(db, sql: "SELECT max(log_offset) FROM log") ?? 0
        let kept = withLastOffset ? try Int64.fetchOne(db, sql: "SELECT max(log_offset) FROM users") ?? 0 : 0
        let started: Int64 = row[1]
        let trimmedBefore: Int64 = row[3]
        return LogState(
            epoch: row[0], lastOffset: UInt64(max(0, logged, kept)), trimmedThrough: UInt64(max(0, row[2] as Int64)),
            horizon: BrokerTime(milliseconds: max(started, trimmedBefore)))
    }

    /// Entries with an offset above `after`, oldest first, at most `limit`.
    public func events(after: UInt64, limit: Int) throws -> [LogEntry] {
        try entries(
            where: "log_offset > ?", arguments: [Int64(clamping: after)], order: "log_offset", limit: limit)
    }

    /// One user's entries with an offset above `after` and a time from `from` to `to`, oldest first, at most `limit`.
    public func history(
        of user: UserID, from: BrokerTime?, to: BrokerTime?, after: UInt64?, limit: Int
    ) throws -> [LogEntry] {
        // `+at`: the time bounds filter rows of the user's index range; they must not pick the time index instead.
        try entries(
            where: "user = ? AND log_offset > ? AND +at >= ? AND +at <= ?",
            arguments: [
                user.rawValue, Int64(clamping: after ?? 0), from?.milliseconds ?? Int64.min,
                to?.milliseconds ?? Int64.max,
            ],
            order: "log_offset", limit: limit)
    }

    /// Each user's latest entry at or before `time`, for those who have one; only entries at or below `through`.
    public func latest(of users: [UserID], at time: BrokerTime, through: UInt64 = .max) throws -> [UserID: LogEntry] {
        try read { db in
            var found: [UserID: LogEntry] = [:]
            for user in users {
                let rows = try Self.entries(
                    db, where: "user = ? AND +at <= ? AND +log_offset <= ?",
                    arguments: [user.rawValue, time.milliseconds, Int64(clamping: through)],
                    order: "log_offset DESC", limit: 1)
                if let entry = rows.first { found[user] = entry }
            }
            return found
        }
    }

    /// The last offset acknowledged by the webhook at `url`, if it has one.
    public func webhookCursor(for url: String) throws -> UInt64? {
        try read { db in
            try Int64.fetchOne(db, sql: "SELECT log_offset FROM webhook_cursors WHERE url = ?", arguments: [url])
                .map { UInt64(max(0, $0)) }
        }
    }

    /// Keeps `offset` as the last one the webhook at `url` acknowledged.
    public func saveWebhookCursor(_ offset: UInt64, for url: String) throws {
        try saveWebhookCursors([(url, offset)])
    }

    /// Keeps each value under its key, in one transaction: a crash keeps all of them or none. A key keeps the
    /// larger of its old and new values.
    public func saveWebhookCursors(_ values: [(key: String, value: UInt64)]) throws {
        let rows = try values.map { ($0.key, try storableInteger($0.value, "a webhook cursor", path: path)) }
        try SQLiteStore.sqlite(.write, path: path) {
            try database.write { db in
                for (key, value) in rows {
                    try db.execute(
                        sql: """
                            INSERT INTO webhook_cursors (url, log_offset) VALUES (?, ?)
                            ON CONFLICT (url) DO UPDATE SET log_offset = max(log_offset, excluded.log_offset)
                            """,
                        arguments: [key, value])
                }
            }
        }
    }

    private func entries(where condition: String, arguments: StatementArguments, order: String, limit: Int) throws
        -> [LogEntry]
    {
        try read { db in try Self.entries(db, where: condition, arguments: arguments, order: order, limit: limit) }
    }

    private static func entries(
        _ db: Database, where condition: String, arguments: StatementArguments, order: String, limit: Int
    ) throws -> [LogEntry] {
        let rows = try Row.fetchCursor(
            db,
            sql: """
                SELECT log_offset, at, user, status, text, since, last_seen, sessions, seq, reason FROM log
                WHERE \(condition) ORDER BY \(order) LIMIT \(max(0, limit))
                """,
            arguments: arguments)
        var entries: [LogEntry] = []
        while let row = try rows.next() {
            // A row that does not read is left out, as at load: never trusted, never a crash.
            if let entry = try? SQLiteStore.logEntry(from: row) { entries.append(entry) }
        }
        return entries
    }

    private func read<T>(_ body: (Database) throws -> T) throws -> T {
        try SQLiteStore.sqlite(.load, path: path) { try database.read(body) }
    }
}

extension SQLiteStore {
    /// Prepares the log as the broker starts: with `keep`, a log that was not kept (a new file, or one run with
    /// `--history-retention-ms 0`) starts anew under a new epoch (`newEpoch`); without, the log is emptied and
    /// marked as not kept, so that a later start with history cannot continue a log with a hole in it.
    public func openLog(keep: Bool) throws -> (state: LogState, log: PresenceLog)? {
        let state = try prepareLog(keep: keep, newEpoch: Self.newEpoch())
        return (state, try PresenceLog(directory: directory))
    }

    public func restartLog() throws -> String {
        let epoch = Self.newEpoch()
        try Self.sqlite(.write, path: path) { try database.write { db in try Self.startLog(db, epoch: epoch) } }
        return epoch
    }

    /// A new log epoch: 16 random hex digits.
    static func newEpoch() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next() as UInt64, radix: 16).leftPadded(to: 16)
    }

    func prepareLog(keep: Bool, newEpoch: @autoclosure () -> String) throws -> LogState {
        try Self.sqlite(.write, path: path) {
            try database.write { db in
                let state = try PresenceLog.state(db)
                if keep && state.epoch.isEmpty {
                    try Self.startLog(db, epoch: newEpoch())
                } else if !keep && !state.epoch.isEmpty {
                    try Self.startLog(db, epoch: "")
                }
                return try PresenceLog.state(db)
            }
        }
    }

    /// Deletes up to `maxRows` entries older than `cutoff`, oldest first, keeping each user's latest entry before
    /// it (which still tells the user's state after the cut-off); returns how many went. Once nothing older is left
    /// to delete, `cutoff` becomes the log's horizon.
    public func trimLog(before cutoff: BrokerTime, maxRows: Int) throws -> Int {
        try Self.sqlite(.write, path: path) {
            try database.write { db in
                let doomed = try Int64.fetchAll(
                    db,
                    sql: """
                        SELECT l.log_offset FROM log l WHERE l.at < ? AND EXISTS (
                            SELECT 1 FROM log m WHERE m.user = l.user AND m.log_offset > l.log_offset AND m.at < ?)
                        ORDER BY l.log_offset LIMIT ?
                        """,
                    arguments: [cutoff.milliseconds, cutoff.milliseconds, maxRows])
                guard let last = doomed.last else {
                    try db.execute(
                        sql: "UPDATE log_info SET trimmed_before = max(trimmed_before, ?) WHERE id = 1",
                        arguments: [cutoff.milliseconds])
                    return 0
                }
                let delete = try db.cachedStatement(sql: "DELETE FROM log WHERE log_offset = ?")
                for offset in doomed {
                    delete.setUncheckedArguments([offset])
                    try delete.execute()
                }
                try db.execute(
                    sql: "UPDATE log_info SET trimmed_through = max(trimmed_through, ?) WHERE id = 1",
                    arguments: [last])
                if doomed.count < maxRows {
                    try db.execute(
                        sql: "UPDATE log_info SET trimmed_before = max(trimmed_before, ?) WHERE id = 1",
                        arguments: [cutoff.milliseconds])
                }
                return doomed.count
            }
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
