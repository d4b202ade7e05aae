import Foundation
import RollCallCore
import Testing

@testable import RollCallStore

/// What only the SQLite store does: files, WAL, reopening, bad rows and the errors of opening.
@Suite("SQLite store")
struct SQLiteStoreTests {
    /// A store opened again on the same directory, after the first one closed, reads everything written.
    @Test func reopenSeesEverything() throws {
        try withTemporaryDirectory { directory in
            let batch = StoreBatch(
                records: [fullRecord("alice"), bareRecord("bob")],
                groups: [StoredGroup(group: "team".group, members: ["alice".user, "bob".user], seq: 4)],
                brokerTime: at(1_234))
            do {
                let store = try SQLiteStore(directory: directory)
                try store.write(batch)
            }
            let reopened = try SQLiteStore(directory: directory)
            #expect(
                try reopened.load()
                    == StoredState(records: batch.records, groups: batch.groups, brokerTime: batch.brokerTime))
        }
    }

    /// The database is `<directory>/rollcall.sqlite3`, in WAL mode with `synchronous = NORMAL` and foreign keys on.
    @Test func walModeIsOn() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            #expect(store.path == directory + "/rollcall.sqlite3")
            #expect(FileManager.default.fileExists(atPath: store.path))
            #expect(try store.scalar("PRAGMA journal_mode") == "wal")
            #expect(try store.scalar("PRAGMA synchronous") == "1")  // NORMAL
            #expect(try store.scalar("PRAGMA foreign_keys") == "1")
        }
    }

    /// The schema is that of migrations v1, v2 (the presence log) and v3 (privacy), and opening an up-to-date file
    /// again runs no migration twice.
    @Test func schemaIsMigratedOnce() throws {
        try withTemporaryDirectory { directory in
            _ = try SQLiteStore(directory: directory)
            let store = try SQLiteStore(directory: directory)
            let migrations = try store.scalar("SELECT group_concat(identifier) FROM grdb_migrations")
            #expect(migrations == "v1,v2: presence log,v3: privacy")
            let tables = try store.scalar(
                "SELECT group_concat(name) FROM (SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'grdb%' ORDER BY name)"
            )
            #expect(
                tables == "groups,log,log_info,members,meta,privacy,privacy_frozen,privacy_lists,users,webhook_cursors")
        }
    }

    /// Deleting a group deletes its rows in `members` (ON DELETE CASCADE), not only the group's row.
    @Test func membersCascade() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.write(
                StoreBatch(
                    groups: [
                        StoredGroup(group: "a".group, members: ["x".user, "y".user], seq: 1),
                        StoredGroup(group: "b".group, members: ["x".user], seq: 1),
                    ], brokerTime: at(1)))
            #expect(try store.scalar("SELECT count(*) FROM members") == "3")
            try store.write(StoreBatch(deletedGroups: ["a".group], brokerTime: at(2)))
            #expect(try store.scalar("SELECT count(*) FROM members") == "1")
            #expect(try store.scalar("SELECT group_concat(grp) FROM members") == "b")
        }
    }

    /// Missing parents of the data directory are made.
    @Test func createsMissingDirectories() throws {
        try withTemporaryDirectory { directory in
            let nested = directory + "/var/lib/rollcall/"
            let store = try SQLiteStore(directory: nested)
            try store.write(StoreBatch(records: [bareRecord("alice")], brokerTime: at(1)))
            #expect(store.path == nested + "rollcall.sqlite3")
            #expect(FileManager.default.fileExists(atPath: store.path))
        }
    }

    /// A data directory under a regular file throws a StoreError that names the directory and the system's reason.
    @Test func directoryUnderAFileFails() throws {
        try withTemporaryDirectory { directory in
            let file = directory + "/plain"
            #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
            let error = try #require(throws: StoreError.self) { try SQLiteStore(directory: file + "/data") }
            #expect(error.operation == .createDirectory)
            #expect(error.path == file + "/data")
            #expect(error.message == "Not a directory")
            #expect(error.description == "cannot create the data directory \(file)/data: Not a directory (code 20)")
        }
    }

    /// A data directory path that is a regular file is refused, not written into.
    @Test func directoryThatIsAFileFails() throws {
        try withTemporaryDirectory { directory in
            let file = directory + "/plain"
            #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
            let error = try #require(throws: StoreError.self) { try SQLiteStore(directory: file) }
            #expect(error.operation == .createDirectory)
            #expect(error.message == "exists and is not a directory")
        }
    }

    /// A database path that is a directory throws a StoreError with the path and SQLite's message.
    @Test func databaseThatCannotBeOpenedFails() throws {
        try withTemporaryDirectory { directory in
            try FileManager.default.createDirectory(
                atPath: directory + "/rollcall.sqlite3", withIntermediateDirectories: false)
            let error = try #require(throws: StoreError.self) { try SQLiteStore(directory: directory) }
            #expect(error.operation == .open)
            #expect(error.path == directory + "/rollcall.sqlite3")
            #expect(error.code != nil)
            #expect(error.description.hasPrefix("cannot open \(directory)/rollcall.sqlite3: "))
        }
    }

    /// A file that is not a SQLite database throws a StoreError with SQLite's "file is not a database".
    @Test func fileThatIsNotADatabaseFails() throws {
        try withTemporaryDirectory { directory in
            let garbage = Data(repeating: 0x5A, count: 4096)
            #expect(FileManager.default.createFile(atPath: directory + "/rollcall.sqlite3", contents: garbage))
            let error = try #require(throws: StoreError.self) { try SQLiteStore(directory: directory) }
            #expect(error.operation == .open)
            #expect(error.message == "file is not a database")
            #expect(error.code == 26)  // SQLITE_NOTADB
        }
    }

    /// Rows that do not decode (unknown status or reason, invalid ids, wrong types, negative seq) are left out and
    /// counted, members of a group left out included; every good row still loads.
    @Test func badRowsAreSkippedAndCounted() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let good = fullRecord("alice")
            let team = StoredGroup(group: "team".group, members: ["alice".user, "bob".user], seq: 3)
            try store.write(StoreBatch(records: [good], groups: [team], brokerTime: at(77)))
            try store.execute(
                """
                INSERT INTO users VALUES ('bob', 'sleeping', NULL, NULL, NULL, 0, 1, NULL, NULL);
                INSERT INTO users VALUES ('not valid!', 'online', NULL, NULL, NULL, 1, 1, NULL, NULL);
                INSERT INTO users VALUES ('carol', 'online', NULL, NULL, NULL, 1, 'abc', NULL, NULL);
                INSERT INTO users VALUES ('dave', 'offline', NULL, NULL, NULL, 0, 1, 'vanished', NULL);
                INSERT INTO users VALUES ('erin', 'offline', NULL, 12.5, NULL, 0, 1, NULL, NULL);
                INSERT INTO users VALUES ('frank', 'offline', NULL, NULL, NULL, 0, -1, NULL, NULL);
                INSERT INTO users VALUES ('gina', 'online', x'00ff', NULL, NULL, 1, 1, NULL, NULL);
                INSERT INTO "groups" VALUES ('bad group', 1);
                INSERT INTO members VALUES ('bad group', 'alice');
                INSERT INTO members VALUES ('team', 'no way');
                """)
            let loaded = try store.load()
            #expect(loaded.records == [good])
            #expect(loaded.groups == [team])
            #expect(loaded.brokerTime == at(77))
            #expect(loaded.skippedRows == 10)

            try store.execute("UPDATE meta SET value = 'soon' WHERE key = 'broker_time'")
            #expect(try store.load().brokerTime == nil)
            #expect(try store.load().skippedRows == 11)
        }
    }

    /// A store notices when its file is deleted or replaced, and `reopened()` makes a new, empty one in its place.
    @Test func noticesDeletedOrReplacedFile() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.write(StoreBatch(records: [fullRecord("alice")], brokerTime: at(1)))
            #expect(store.isIntact)
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store.path + suffix) }
            #expect(!store.isIntact)
            let fresh = try store.reopened()
            #expect(fresh.isIntact)
            #expect(try fresh.load().records.isEmpty)
            // Replaced: another file at the same path is not the one the store opened.
            try FileManager.default.moveItem(atPath: store.path, toPath: store.path + ".old")
            #expect(FileManager.default.createFile(atPath: store.path, contents: Data()))
            #expect(!fresh.isIntact)
        }
    }
}
