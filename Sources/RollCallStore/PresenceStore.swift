/// Where the broker keeps its state. Implementations are safe to call from one writer thread at a time.
public protocol PresenceStore: Sendable {
    /// Reads everything stored.
    func load() throws -> StoredState
    /// Writes a batch atomically: all of it or none of it.
    func write(_ batch: StoreBatch) throws
}
