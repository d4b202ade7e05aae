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
        migrator.registerMigration("v2: presence log") { db in
            // The presence log (docs/history.md). `log_offset` rather than `offset`, an SQL keyword. A log made on a
            // store that already holds users starts with one entry per user (their current record), so that
            // `query` with `at` answers for everyone from the log's start.
            try db.execute(
                sql: """
                    ALTER TABLE users ADD COLUMN log_offset INTEGER;
                    CREATE TABLE log (
                        log_offset INTEGER PRIMARY KEY,
                        at INTEGER NOT NULL,
                        user TEXT NOT NULL,
                        status TEXT NOT NULL,
                        text TEXT,
                        since INTEGER,
                        last_seen INTEGER,
                        sessions INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        reason TEXT
                    );
                    CREATE INDEX log_by_user ON log (user, log_offset);
                    CREATE INDEX log_by_time ON log (at);
                    CREATE TABLE log_info (
                        id INTEGER PRIMARY KEY CHECK (id = 1),
                        epoch TEXT NOT NULL,
                        started INTEGER NOT NULL,
                        trimmed_through INTEGER NOT NULL,
                        trimmed_before INTEGER NOT NULL
                    );
                    CREATE TABLE webhook_cursors (
                        url TEXT PRIMARY KEY,
                        log_offset INTEGER NOT NULL
                    );
                    """)
            try startLog(db, epoch: "")
        }
        migrator.registerMigration("v3: privacy") { db in
            // Who may see whom (docs/privacy.md). `privacy_lists.kind` is `contact` or `block`. `privacy_frozen`
            // holds the records frozen for hidden viewers: `viewer` '' (never a valid user id) is the mask, what
            // viewers hidden by the policy get; the other columns are a record's, as in `users`.
            try db.execute(
                sql: """
                    CREATE TABLE privacy (
                        user TEXT PRIMARY KEY,
                        visibility TEXT NOT NULL,
                        last_seen TEXT NOT NULL
                    );
                    CREATE TABLE privacy_lists (
                        user TEXT NOT NULL REFERENCES privacy(user) ON DELETE CASCADE,
                        kind TEXT NOT NULL,
                        other TEXT NOT NULL,
                        PRIMARY KEY (user, kind, other)
                    );
                    CREATE TABLE privacy_frozen (
                        viewer TEXT NOT NULL,
                        user TEXT NOT NULL REFERENCES privacy(user) ON DELETE CASCADE,
                        status TEXT NOT NULL,
                        text TEXT,
                        since INTEGER,
                        last_seen INTEGER,
                        sessions INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        reason TEXT,
                        log_offset INTEGER,
                        PRIMARY KEY (user, viewer)
                    );
                    """)
        }
        return migrator
    }()

    /// Starts a new log (a new epoch) from the users' current records, at the stored broker time; an empty `epoch`
    /// marks the log as not kept (`--history-retention-ms 0`).
    static func startLog(_ db: Database, epoch: String) throws {
        let started =
            try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = ?", arguments: [brokerTimeKey]) ?? 0
        try db.execute(sql: "DELETE FROM log")
        try db.execute(
            sql: """
                INSERT INTO log (log_offset, at, user, status, text, since, last_seen, sessions, seq, reason)
                SELECT ROW_NUMBER() OVER (ORDER BY user), ?, user, status, text, since, last_seen, sessions, seq, reason
                FROM users WHERE ? != ''
                """,
            arguments: [started, epoch])
        try db.execute(
            sql: "UPDATE users SET log_offset = (SELECT log_offset FROM log WHERE log.user = users.user)")
        try db.execute(
            sql: """
                INSERT INTO log_info (id, epoch, started, trimmed_through, trimmed_before) VALUES (1, ?, ?, 0, 0)
                ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch, started = excluded.started,
                    trimmed_through = 0, trimmed_before = 0
                """,
            arguments: [epoch, started])
    }

    /// The `meta` key of the latest broker time.
    static let brokerTimeKey = "broker_time"
}
