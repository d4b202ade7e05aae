/// Why the store failed, with the path and SQLite's own message.
public struct StoreError: Error, Equatable, CustomStringConvertible {
    /// What the store was doing when it failed.
    public enum Operation: String, Sendable {
        case createDirectory = "create the data directory"
        case open = "open"
        case load = "read"
        case write = "write to"
    }

    /// What the store was doing.
    public let operation: Operation
    /// The data directory or database file concerned.
    public let path: String
    /// The reason: SQLite's message, the system's (`strerror`), or the store's own.
    public let message: String
    /// SQLite's extended result code, or the `errno`, where there is one.
    public let code: Int32?

    init(_ operation: Operation, path: String, message: String, code: Int32? = nil) {
        self.operation = operation
        self.path = path
        self.message = message
        self.code = code
    }

    public var description: String {
        "cannot \(operation.rawValue) \(path): \(message)" + (code.map { " (code \($0))" } ?? "")
    }
}
