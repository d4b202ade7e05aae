import GRDB
import RollCallCore

/// Writing a batch: one cached (prepared once per connection) statement per kind of change, rebound per row,
/// all inside the transaction `DatabaseQueue.write` opens.
extension SQLiteStore {
    static func write(_ batch: StoreBatch, to db: Database, path: String) throws {
        let upsertUser = try db.cachedStatement(
            sql: """
                INSERT INTO users (user, status, text, since, last_seen, sessions, seq, reason)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (user) DO UPDATE SET
                    status = excluded.status, text = excluded.text, since = excluded.since,
                    last_seen = excluded.last_seen, sessions = excluded.sessions, seq = excluded.seq,
                    reason = excluded.reason
                """)
        for record in batch.records {
            let seq = try storableInteger(record.seq, "the seq of user \(record.user)", path: path)
            upsertUser.setUncheckedArguments([
                record.user.rawValue, record.status.rawValue, record.text, record.since?.milliseconds,
                record.lastSeen?.milliseconds, Int64(record.sessions), seq, record.reason?.rawValue,
            ])
            try upsertUser.execute()
        }
        try writeGroups(batch, to: db, path: path)
        try db.execute(
            sql: """
                INSERT INTO meta (key, value) VALUES (?, ?)
                ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)
                """,
            arguments: [brokerTimeKey, batch.brokerTime.milliseconds])
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
