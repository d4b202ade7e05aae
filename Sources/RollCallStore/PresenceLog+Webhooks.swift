import GRDB

extension PresenceLog {
    /// How many entries have an offset above `after`: webhook delivery's pending-events gauge (docs/webhooks.md),
    /// read at most once a second per URL.
    public func count(after: UInt64) throws -> Int {
        try SQLiteStore.sqlite(.load, path: path) {
            try database.read { db in
                try Int.fetchOne(
                    db, sql: "SELECT count(*) FROM log WHERE log_offset > ?", arguments: [Int64(clamping: after)]) ?? 0
            }
        }
    }
}
