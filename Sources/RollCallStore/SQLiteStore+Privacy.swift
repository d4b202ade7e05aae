import GRDB
import RollCallCore

/// Users' privacy settings (docs/privacy.md), in the tables of migration "v3: privacy".
extension SQLiteStore {
    /// Replaces each user's stored settings by the given ones; empty settings delete them.
    static func writePrivacy(_ all: [PrivacySettings], to db: Database, path: String) throws {
        guard !all.isEmpty else { return }
        let delete = try db.cachedStatement(sql: "DELETE FROM privacy WHERE user = ?")
        let insert = try db.cachedStatement(sql: "INSERT INTO privacy (user, visibility, last_seen) VALUES (?, ?, ?)")
        let insertListed = try db.cachedStatement(
            sql: "INSERT OR IGNORE INTO privacy_lists (user, kind, other) VALUES (?, ?, ?)")
        let insertFrozen = try db.cachedStatement(
            sql: """
                INSERT INTO privacy_frozen
                    (viewer, user, status, text, since, last_seen, sessions, seq, reason, log_offset)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for settings in all {
            let user = settings.user.rawValue
            delete.setUncheckedArguments([user])
            try delete.execute()  // its lists and frozen records go with it: ON DELETE CASCADE
            guard !settings.isEmpty else { continue }
            insert.setUncheckedArguments([
                user, settings.policy.visibility.rawValue, settings.policy.lastSeen.rawValue,
            ])
            try insert.execute()
            for (kind, list) in [("contact", settings.contacts), ("block", settings.blocks)] {
                for other in list {
                    insertListed.setUncheckedArguments([user, kind, other.rawValue])
                    try insertListed.execute()
                }
            }
            var frozen: [(viewer: String, record: PresenceRecord)] = settings.frozen.map {
                ($0.viewer.rawValue, $0.record)
            }
            if let mask = settings.mask { frozen.insert(("", mask), at: 0) }
            for (viewer, record) in frozen {
                insertFrozen.setUncheckedArguments([
                    viewer, user, record.status.rawValue, record.text, record.since?.milliseconds,
                    record.lastSeen?.milliseconds, Int64(record.sessions),
                    try storableInteger(record.seq, "the seq of user \(record.user)", path: path),
                    record.reason?.rawValue,
                    try record.offset.map { try storableInteger($0, "a log offset", path: path) },
                ])
                try insertFrozen.execute()
            }
        }
    }

    /// Reads every user's settings; a row that does not read is left out and counted, as elsewhere.
    static func loadPrivacy(_ db: Database, into state: inout StoredState) throws {
        var index: [String: Int] = [:]
        let rows = try Row.fetchCursor(db, sql: "SELECT user, visibility, last_seen FROM privacy ORDER BY user")
        while let row = try rows.next() {
            do throws(BadRow) {
                let user = try userID(row[0])
                guard let visibility = Audience(rawValue: try text(row[1])),
                    let lastSeen = Audience(rawValue: try text(row[2]))
                else { throw BadRow() }
                index[user.rawValue] = state.privacy.count
                state.privacy.append(
                    PrivacySettings(
                        user: user, policy: PrivacyPolicy(visibility: visibility, lastSeen: lastSeen), contacts: [],
                        blocks: [], mask: nil, frozen: []))
            } catch {
                state.skippedRows += 1
            }
        }
        let lists = try Row.fetchCursor(db, sql: "SELECT user, kind, other FROM privacy_lists ORDER BY user, other")
        while let row = try lists.next() {
            do throws(BadRow) {
                guard let position = index[try text(row[0])] else { throw BadRow() }
                let other = try userID(row[2])
                switch try text(row[1]) {
                case "contact": state.privacy[position].contacts.append(other)
                case "block": state.privacy[position].blocks.append(other)
                default: throw BadRow()
                }
            } catch {
                state.skippedRows += 1
            }
        }
        let frozen = try Row.fetchCursor(
            db,
            sql: """
                SELECT viewer, user, status, text, since, last_seen, sessions, seq, reason, log_offset
                FROM privacy_frozen ORDER BY user, viewer
                """)
        while let row = try frozen.next() {
            do throws(BadRow) {
                let kept = try record(from: row, first: 1)
                guard let position = index[kept.user.rawValue] else { throw BadRow() }
                if try text(row[0]).isEmpty {
                    state.privacy[position].mask = kept
                } else {
                    state.privacy[position].frozen.append(
                        PresenceRecord.Frozen(viewer: try userID(row[0]), record: kept))
                }
            } catch {
                state.skippedRows += 1
            }
        }
    }
}
