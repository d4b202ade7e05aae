import RollCallCore
import Synchronization

/// Keeps everything in memory; for --ephemeral and tests.
///
/// It follows ``SQLiteStore``'s rules, so that either can stand for the other: upserts, memberships replaced as
/// sets, deletions after upserts, a broker time that only grows, empty batches ignored, a seq above `Int64.max`
/// refused, and a failed batch changes nothing (it is checked whole before anything is applied).
public final class MemoryStore: PresenceStore {
    private struct Contents {
        var records: [UserID: PresenceRecord] = [:]
        var groups: [GroupID: (members: Set<UserID>, seq: UInt64)] = [:]
        var brokerTime: BrokerTime?
        var privacy: [UserID: PrivacySettings] = [:]
    }

    private let contents = Mutex(Contents())

    /// An empty store.
    public init() {}

    /// Everything written so far, sorted as ``SQLiteStore`` returns it.
    public func load() -> StoredState {
        contents.withLock { contents in
            StoredState(
                records: contents.records.values.sorted { $0.user < $1.user },
                groups: contents.groups.map {
                    StoredGroup(group: $0.key, members: $0.value.members.sorted(), seq: $0.value.seq)
                }
                .sorted { $0.group < $1.group },
                brokerTime: contents.brokerTime,
                privacy: contents.privacy.values.sorted { $0.user < $1.user })
        }
    }

    /// Applies a batch under the lock, after checking all of it.
    public func write(_ batch: StoreBatch) throws {
        guard !batch.isEmpty else { return }
        let path = "(memory)"
        for record in batch.records {
            _ = try storableInteger(record.seq, "the seq of user \(record.user)", path: path)
        }
        for group in batch.groups {
            _ = try storableInteger(group.seq, "the seq of group \(group.group)", path: path)
        }
        contents.withLock { contents in
            for record in batch.records { contents.records[record.user] = record }
            for group in batch.groups { contents.groups[group.group] = (Set(group.members), group.seq) }
            for group in batch.deletedGroups { contents.groups[group] = nil }
            for settings in batch.privacy { contents.privacy[settings.user] = settings.isEmpty ? nil : settings }
            contents.brokerTime = max(contents.brokerTime ?? batch.brokerTime, batch.brokerTime)
        }
    }
}
