import GRDB

/// The schema, one migration per version. Migrations are only ever added, never edited once released.
extension SQLiteStore {
    static let migrator: DatabaseMigrator = {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            // seq is a UInt64 that stays below about 2^53, well within SQLite's signed 64-bit INTEGER.
            // `groups` is quoted: GROUPS is an SQL keyword (window frames).
            try db.execute(
                sql: """
                    CREATE TABLE users (
                        user TEXT PRIMARY KEY,
                        status TEXT NOT NULL,
                        text TEXT,
                        since INTEGER,
                        last_seen INTEGER,
                        sessions INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        reason TEXT
                    );
                    CREATE TABLE "groups" (
                        grp TEXT PRIMARY KEY,
                        seq INTEGER NOT NULL
                    );
                    CREATE TABLE members (
                        grp TEXT NOT NULL REFERENCES "groups"(grp) ON DELETE CASCADE,
                        user TEXT NOT NULL,
                        PRIMARY KEY (grp, user)
                    );
                    CREATE TABLE meta (
                        key TEXT PRIMARY KEY,
                        value INTEGER NOT NULL
                    );
                    """)
        }
        return migrator
    }()

    /// The `meta` key of the latest broker time.
    static let brokerTimeKey = "broker_time"
}
