import GRDB

/// Plain SQL on the store's own connection, for tests and diagnostics: not part of the public API.
extension SQLiteStore {
    /// The first column of the first row `sql` returns, as text.
    func scalar(_ sql: String) throws -> String? {
        try Self.sqlite(.load, path: path) { try database.read { try String.fetchOne($0, sql: sql) } }
    }

    /// Runs `sql` in a transaction of its own.
    func execute(_ sql: String) throws {
        try Self.sqlite(.write, path: path) { try database.write { try $0.execute(sql: sql) } }
    }
}
