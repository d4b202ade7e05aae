import Foundation
import RollCallCore
import RollCallStore
import Testing

extension String {
    var user: UserID { UserID(validating: self)! }
    var group: GroupID { GroupID(validating: self)! }
}

/// A broker time, in milliseconds.
func at(_ milliseconds: Int64) -> BrokerTime { BrokerTime(milliseconds: milliseconds) }

/// Runs `body` with a fresh directory under the system's temporary one, and removes it afterwards.
func withTemporaryDirectory<T>(_ body: (String) throws -> T) throws -> T {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-store-\(UUID().uuidString)")
        .path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// The two implementations, so that one behavioural test runs against both.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, memory

    var testDescription: String { rawValue }

    /// Runs `body` with a new, empty store of this kind; a SQLite one lives in a temporary directory.
    func withStore(_ body: (any PresenceStore) throws -> Void) throws {
        switch self {
        case .memory:
            try body(MemoryStore())
        case .sqlite:
            try withTemporaryDirectory { directory in try body(SQLiteStore(directory: directory)) }
        }
    }
}

/// A record with every field set.
func fullRecord(_ user: String, seq: UInt64 = 7) -> PresenceRecord {
    PresenceRecord(
        user: user.user, status: .busy, text: "in a meeting, back at 3 ☕", since: at(1_700_000_000_123),
        lastSeen: at(1_700_000_000_456), sessions: 2, seq: seq, reason: .timeout)
}

/// A record with every optional field `nil`.
func bareRecord(_ user: String, seq: UInt64 = 3) -> PresenceRecord {
    PresenceRecord(user: user.user, status: .offline, since: nil, lastSeen: nil, sessions: 0, seq: seq)
}
