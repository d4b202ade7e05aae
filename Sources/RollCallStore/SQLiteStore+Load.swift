import GRDB
import RollCallCore

/// Reading everything back. A row that does not make a valid value (an invalid id, an unknown status or reason,
/// a value of the wrong type, a negative seq) is left out and counted, never trusted and never a crash: a restart
/// with one bad row loses that row, not the broker.
///
/// Rows come out in primary-key order, which is `UserID`'s and `GroupID`'s order: valid ids are ASCII, where
/// SQLite's byte order (`BINARY`) and Swift's string order agree.
extension SQLiteStore {
    static func load(_ db: Database) throws -> StoredState {
        var state = StoredState()
        let users = try Row.fetchCursor(
            db,
            sql:
                "SELECT user, status, text, since, last_seen, sessions, seq, reason, log_offset FROM users ORDER BY user"
        )
        while let row = try users.next() {
            do throws(BadRow) {
                state.records.append(try record(from: row))
            } catch {
                state.skippedRows += 1
            }
        }
        try loadGroups(db, into: &state)
        try loadPrivacy(db, into: &state)
        if let value = try DatabaseValue.fetchOne(
            db, sql: "SELECT value FROM meta WHERE key = ?", arguments: [brokerTimeKey])
        {
            if let milliseconds = try? integer(value) {
                state.brokerTime = BrokerTime(milliseconds: milliseconds)
            } else {
                state.skippedRows += 1
            }
        }
        return state
    }

    private static func loadGroups(_ db: Database, into state: inout StoredState) throws {
        var index: [String: Int] = [:]
        let groups = try Row.fetchCursor(db, sql: #"SELECT grp, seq FROM "groups" ORDER BY grp"#)
        while let row = try groups.next() {
            do throws(BadRow) {
                let id = try groupID(row[0])
                let seq = try unsigned(row[1])
                index[id.rawValue] = state.groups.count
                state.groups.append(StoredGroup(group: id, members: [], seq: seq))
            } catch {
                state.skippedRows += 1
            }
        }
        let members = try Row.fetchCursor(db, sql: "SELECT grp, user FROM members ORDER BY grp, user")
        while let row = try members.next() {
            do throws(BadRow) {
                // A member of a group that was left out is left out too.
                guard let position = index[try text(row[0])] else { throw BadRow() }
                state.groups[position].members.append(try userID(row[1]))
            } catch {
                state.skippedRows += 1
            }
        }
    }

    /// A record from `user, status, text, since, last_seen, sessions, seq, reason` starting at column `first`, and
    /// `log_offset` after them when the row has it.
    static func record(from row: Row, first: Int = 0) throws(BadRow) -> PresenceRecord {
        let user = try userID(row[first])
        guard let status = Status(rawValue: try text(row[first + 1])) else { throw BadRow() }
        let since = try optional(row[first + 3], integer).map(BrokerTime.init)
        let lastSeen = try optional(row[first + 4], integer).map(BrokerTime.init)
        guard let sessions = Int(exactly: try integer(row[first + 5])) else { throw BadRow() }
        let reason = try optional(row[first + 7], text).map { (name) throws(BadRow) -> OfflineReason in
            guard let reason = OfflineReason(rawValue: name) else { throw BadRow() }
            return reason
        }
        return PresenceRecord(
            user: user, status: status, text: try optional(row[first + 2], text), since: since, lastSeen: lastSeen,
            sessions: sessions, seq: try unsigned(row[first + 6]), reason: reason,
            offset: row.count > first + 8 ? try optional(row[first + 8], unsigned) : nil)
    }

    /// A log entry from `log_offset, at, user, status, text, since, last_seen, sessions, seq, reason`.
    static func logEntry(from row: Row) throws(BadRow) -> LogEntry {
        let offset = try unsigned(row[0])
        let time = BrokerTime(milliseconds: try integer(row[1]))
        var record = try record(from: row, first: 2)
        record.offset = offset
        return LogEntry(offset: offset, time: time, record: record)
    }
}

/// A stored value that does not decode to what its column should hold.
struct BadRow: Error {}

// Strict readers: SQLite lets any column hold any type, so each value's storage class is checked, not converted.

func text(_ value: DatabaseValue) throws(BadRow) -> String {
    guard case .string(let string) = value.storage else { throw BadRow() }
    return string
}

private func integer(_ value: DatabaseValue) throws(BadRow) -> Int64 {
    guard case .int64(let integer) = value.storage else { throw BadRow() }
    return integer
}

func unsigned(_ value: DatabaseValue) throws(BadRow) -> UInt64 {
    guard let unsigned = UInt64(exactly: try integer(value)) else { throw BadRow() }
    return unsigned
}

private func optional<T>(_ value: DatabaseValue, _ read: (DatabaseValue) throws(BadRow) -> T) throws(BadRow) -> T? {
    value.isNull ? nil : try read(value)
}

func userID(_ value: DatabaseValue) throws(BadRow) -> UserID {
    guard let id = UserID(validating: try text(value)) else { throw BadRow() }
    return id
}

private func groupID(_ value: DatabaseValue) throws(BadRow) -> GroupID {
    guard let id = GroupID(validating: try text(value)) else { throw BadRow() }
    return id
}
