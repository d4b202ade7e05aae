import RollCallCore

/// Where the broker keeps its state. Implementations are safe to call from one writer thread at a time.
public protocol PresenceStore: Sendable {
    /// Reads everything stored.
    func load() throws -> StoredState
    /// Writes a batch atomically: all of it or none of it.
    func write(_ batch: StoreBatch) throws
    /// Whether writes still reach what the next start will load: `false` once a database file was deleted or
    /// replaced under the running broker (writes would go to a file nobody will read).
    var isIntact: Bool { get }
    /// A store opened anew at the same place, empty if the file is gone; for a store that is no longer intact.
    func reopened() throws -> any PresenceStore
    /// Where the state lives, for logs.
    var location: String { get }
    /// Prepares the presence log as the broker starts (docs/history.md) and opens it for reading: kept with `keep`,
    /// emptied and marked as not kept without. `nil` for a store that keeps no log.
    func openLog(keep: Bool) throws -> (state: LogState, log: PresenceLog)?
    /// Starts the log over under a new epoch (its entries gone, each user's record its first); the new epoch.
    func restartLog() throws -> String
    /// Deletes up to `maxRows` log entries older than `cutoff` (each user's latest before it stays); how many went.
    func trimLog(before cutoff: BrokerTime, maxRows: Int) throws -> Int
}

extension PresenceStore {
    /// A store without a file is always intact.
    public var isIntact: Bool { true }
    public func reopened() throws -> any PresenceStore { self }
    public var location: String { "memory" }
    public func openLog(keep: Bool) throws -> (state: LogState, log: PresenceLog)? { nil }
    public func trimLog(before cutoff: BrokerTime, maxRows: Int) throws -> Int { 0 }
    public func restartLog() throws -> String { "" }
}
