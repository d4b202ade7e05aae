import GRDB
import RollCallCore

/// Writing a batch: one cached (prepared once per connection) statement per kind of change, rebound per row,
/// all inside the transaction `DatabaseQueue.write` opens.
extension SQLiteStore {
    static func write(_ batch: StoreBatch, to db: Database, path: String) throws {
        let upsertUser = try db.cachedStatement(
            sql: """
                INSERT INTO users (user, status, text, since, last_seen, sessions, seq, reason, log_offset)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (user) DO UPDATE SET
                    status = excluded.status, text = excluded.text, since = excluded.since,
                    last_seen = excluded.last_seen, sessions = excluded.sessions, seq = excluded.seq,
                    reason = excluded.reason, log_offset = excluded.log_offset
                """)
        for record in batch.records {
            let seq = try storableInteger(record.seq, "the seq of user \(record.user)", path: path)
            upsertUser.setUncheckedArguments([
                record.user.rawValue, record.status.rawValue, record.text, record.since?.milliseconds,
                record.lastSeen?.milliseconds, Int64(record.sessions), seq, record.reason?.rawValue,
                try record.offset.map { try storableInteger($0, "the log offset of user \(record.user)", path: path) },
            ])
            try upsertUser.execute()
        }
        if let start = batch.logStart { try startClusterLog(start, db: db, path: path) }
        try appendLog(batch.log, to: db, path: path)
        if let floor = batch.logFloor { try raiseLogFloor(floor, time: batch.brokerTime, db: db, path: path) }
        try writePrivacy(batch.privacy, to: db, path: path)
        try writeGroups(batch, to: db, path: path)
        try db.execute(
            sql: """
                INSERT INTO meta (key, value) VALUES (?, ?)
                ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)
                """,
            arguments: [brokerTimeKey, batch.brokerTime.milliseconds])
    }

    /// Keeps the log under a cluster's epoch: a log under another one is emptied, starts at the stored broker time,
    /// and continues no cursor through the floor.
    private static func startClusterLog(_ start: LogStart, db: Database, path: String) throws {
        guard try PresenceLog.state(db, withLastOffset: false).epoch != start.epoch else { return }
        let started =
            try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = ?", arguments: [brokerTimeKey]) ?? 0
        try db.execute(sql: "DELETE FROM log")
        try db.execute(sql: "UPDATE users SET log_offset = NULL")
        try db.execute(
            sql: """
                INSERT INTO log_info (id, epoch, started, trimmed_through, trimmed_before) VALUES (1, ?, ?, ?, 0)
                ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch, started = excluded.started,
                    trimmed_through = excluded.trimmed_through, trimmed_before = 0
                """,
            arguments: [start.epoch, started, try storableInteger(start.floor, "a log floor", path: path)])
    }

    /// Raises the log's floor: entries below `keepFrom` go, but each user's latest (which still tells the user's
    /// state at the floor, as trimming keeps it), and cursors below `through` and times before `time` are no longer
    /// told.
    private static func raiseLogFloor(_ floor: LogFloor, time: BrokerTime, db: Database, path: String) throws {
        let keepFrom = try storableInteger(floor.keepFrom, "a log floor", path: path)
        try db.execute(
            sql: """
                DELETE FROM log WHERE log_offset < ? AND EXISTS (
                    SELECT 1 FROM log m WHERE m.user = log.user AND m.log_offset > log.log_offset AND m.log_offset < ?)
                """,
            arguments: [keepFrom, keepFrom])
        try db.execute(
            sql: """
                UPDATE log_info SET trimmed_through = max(trimmed_through, ?), trimmed_before = max(trimmed_before, ?)
                WHERE id = 1
                """,
            arguments: [try storableInteger(floor.through, "a log floor", path: path), time.milliseconds])
    }

    /// Appends transitions to the log. An offset already there (written again after a failed commit was retried
    /// with more) is left as it was.
    private static func appendLog(_ entries: [LogEntry], to db: Database, path: String) throws {
        guard !entries.isEmpty else { return }
        let insert = try db.cachedStatement(
            sql: """
                INSERT OR IGNORE INTO log (log_offset, at, user, status, text, since, last_seen, sessions, seq, reason)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for entry in entries {
            let record = entry.record
            insert.setUncheckedArguments([
                try storableInteger(entry.offset, "a log offset", path: path), entry.time.milliseconds,
                record.user.rawValue, record.status.rawValue, record.text, record.since?.milliseconds,
                record.lastSeen?.milliseconds, Int64(record.sessions),
                try storableInteger(record.seq, "the seq of user \(record.user)", path: path), record.reason?.rawValue,
            ])
            try insert.execute()
        }
    }

    private static func writeGroups(_ batch: StoreBatch, to db: Database, path: String) throws {
        // An upsert, not INSERT OR REPLACE: replacing the row would delete it first and cascade to its members.
        let upsertGroup = try db.cachedStatement(
            sql: #"INSERT INTO "groups" (grp, seq) VALUES (?, ?) ON CONFLICT (grp) DO UPDATE SET seq = excluded.seq"#)
        let clearMembers = try db.cachedStatement(sql: "DELETE FROM members WHERE grp = ?")
        // OR IGNORE: a user listed twice is one member.
        let insertMember = try db.cachedStatement(sql: "INSERT OR IGNORE INTO members (grp, user) VALUES (?, ?)")
        for group in batch.groups {
            let seq = try storableInteger(group.seq, "the seq of group \(group.group)", path: path)
            let id = group.group.rawValue
            upsertGroup.setUncheckedArguments([id, seq])
            try upsertGroup.execute()
            clearMembers.setUncheckedArguments([id])
            try clearMembers.execute()
            for user in group.members {
                insertMember.setUncheckedArguments([id, user.rawValue])
                try insertMember.execute()
            }
        }
        let deleteGroup = try db.cachedStatement(sql: #"DELETE FROM "groups" WHERE grp = ?"#)
        for group in batch.deletedGroups {
            deleteGroup.setUncheckedArguments([group.rawValue])
            try deleteGroup.execute()  // its members go with it: ON DELETE CASCADE
        }
    }
}
