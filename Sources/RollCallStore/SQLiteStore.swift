import Foundation
import GRDB

/// SQLite in WAL mode under a data directory (created if missing): `<directory>/rollcall.sqlite3`.
///
/// One connection, a GRDB `DatabaseQueue`, rather than a `DatabasePool`: the broker reads once at start and then
/// only one writer thread calls the store, so a pool's reader connections would cost file handles and memory and
/// buy nothing. The queue is still put in WAL mode, for cheap commits and readers (a backup, `sqlite3` from an
/// operator) that do not block the writer.
public final class SQLiteStore: PresenceStore {
    /// The database file.
    public let path: String
    /// The data directory it lives in.
    public let directory: String
    let database: DatabaseQueue
    /// The file's device and inode when it was opened: a different pair, or none, means it was deleted or replaced.
    private let identity: FileIdentity?

    /// With checkpoints apart: the connection that copies the write-ahead log into the file, on a thread of its own.
    private let checkpointer: DatabaseQueue?

    /// How often the thread apart copies the write-ahead log into the file.
    public static let checkpointInterval: Duration = .milliseconds(500)

    /// Opens (or creates) `<directory>/rollcall.sqlite3`, making `directory` if it is missing, and brings the
    /// schema up to date. With `checkpointsApart` (the broker), commits never copy the write-ahead log into the file
    /// themselves (SQLite's automatic checkpoint, a write and an fsync of the file every 1,000 pages, tens of
    /// milliseconds on a shared disk): a thread of the store's own does it with a passive checkpoint on a connection
    /// of its own every ``checkpointInterval``, beside the writer, which publications wait for (docs/history.md).
    public init(directory: String, checkpointsApart: Bool = false) throws {
        try DataDirectory.create(directory)
        let path = (directory.hasSuffix("/") ? directory : directory + "/") + "rollcall.sqlite3"
        self.path = path
        self.directory = directory
        var configuration = Configuration()
        // WAL, and with it GRDB sets `synchronous = NORMAL`: a commit appends to the WAL with write(2) and does not
        // wait for fsync. A committed batch survives the process being killed (kill -9, a crash): it is in the
        // kernel's page cache and SQLite recovers it from the WAL at the next open. Only an OS crash or a power
        // loss can lose the last batches, never corrupt the file; FULL would fsync on every commit for that.
        configuration.journalMode = .wal
        // Another connection (an operator's `sqlite3`, a backup) may hold the lock for a moment: wait, not fail.
        configuration.busyMode = .timeout(5)
        // Needed for `members ... ON DELETE CASCADE`; GRDB's default, stated because the schema relies on it.
        configuration.foreignKeysEnabled = true
        var writerConfiguration = configuration
        if checkpointsApart {
            writerConfiguration.prepareDatabase { db in try db.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        }
        database = try Self.sqlite(.open, path: path) {
            let database = try DatabaseQueue(path: path, configuration: writerConfiguration)
            try Self.migrator.migrate(database)
            return database
        }
        checkpointer =
            checkpointsApart
            ? try Self.sqlite(.open, path: path) { try DatabaseQueue(path: path, configuration: configuration) } : nil
        identity = FileIdentity(path: path)
        self.checkpointsApart = checkpointsApart
        if checkpointer != nil { startCheckpoints() }
    }

    private let checkpointsApart: Bool

    /// Runs passive checkpoints until the store goes; a failure is tried again at the next interval (the log grows
    /// meanwhile, nothing is lost).
    private func startCheckpoints() {
        let thread = Thread { [weak self] in
            let (seconds, attoseconds) = Self.checkpointInterval.components
            let interval = Double(seconds) + Double(attoseconds) / 1e18
            while true {
                Thread.sleep(forTimeInterval: interval)
                guard let self, let checkpointer = self.checkpointer else { return }
                _ = try? checkpointer.writeWithoutTransaction { db in try db.checkpoint(.passive) }
            }
        }
        thread.name = "rollcall-checkpoint"
        thread.start()
    }

    /// Whether `path` is still the file this store opened (a `stat` call).
    public var isIntact: Bool { identity != nil && FileIdentity(path: path) == identity }

    /// A new store on the same directory: the file is made anew if it is gone.
    public func reopened() throws -> any PresenceStore {
        try SQLiteStore(directory: directory, checkpointsApart: checkpointsApart)
    }

    public var location: String { path }

    /// Reads everything stored; unreadable rows are left out and counted in ``StoredState/skippedRows``.
    public func load() throws -> StoredState {
        try Self.sqlite(.load, path: path) { try database.read(Self.load) }
    }

    /// Writes a batch in one transaction: if any statement fails, the transaction is rolled back and nothing of
    /// the batch is stored. An empty batch does not touch the file.
    public func write(_ batch: StoreBatch) throws {
        guard !batch.isEmpty else { return }
        try Self.sqlite(.write, path: path) {
            try database.write { db in try Self.write(batch, to: db, path: path) }
        }
    }

    /// The one funnel for GRDB calls: SQLite's errors become a ``StoreError`` with the path, SQLite's message and
    /// its extended result code.
    static func sqlite<T>(_ operation: StoreError.Operation, path: String, _ body: () throws -> T) throws(StoreError)
        -> T
    {
        do {
            return try body()
        } catch let error as StoreError {
            throw error
        } catch let error as DatabaseError {
            throw StoreError(
                operation, path: path, message: error.message ?? "\(error.resultCode)",
                code: error.extendedResultCode.rawValue)
        } catch {
            throw StoreError(operation, path: path, message: "\(error)")
        }
    }
}
