import Foundation
import RollCallCore
import RollCallWire

/// The last known records in a file the app names, so that a cold start without network shows the last known dots
/// (marked stale) rather than nothing: one record a line, in the protocol's JSON (docs/protocol.md §9.1).
public struct PresenceCache: Sendable {
    /// The file.
    public let url: URL

    public init(url: URL) { self.url = url }

    /// The records in the file; none if it does not exist or cannot be read (a cache is never worth failing for).
    public func load() -> [PresenceRecord] {
        guard let data = try? Data(contentsOf: url) else { return [] }
        return data.split(separator: UInt8(ascii: "\n")).compactMap { try? Codec.decodeRecord(Array($0)) }
    }

    /// Replaces the file's records with `records`, atomically (a crash leaves the old file or the new one).
    public func save(_ records: [PresenceRecord]) throws {
        var bytes: [UInt8] = []
        for record in records.sorted(by: { $0.user < $1.user }) {
            bytes += Codec.encodeRecord(record)
            bytes.append(UInt8(ascii: "\n"))
        }
        try Data(bytes).write(to: url, options: .atomic)
    }
}
