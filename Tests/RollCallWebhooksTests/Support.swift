import RollCallCore
import RollCallWebhooks
import Synchronization

/// Log entries for the tests: user `u<n % 3>`, online, seq and time from the offset.
func entry(_ offset: UInt64) -> LogEntry {
    let user = UserID(validating: "u\(offset % 3)")!
    let time = BrokerTime(milliseconds: 1_893_499_200_000 + Int64(offset))
    return LogEntry(
        offset: offset, time: time,
        record: PresenceRecord(
            user: user, status: offset % 2 == 0 ? .online : .offline, since: time, lastSeen: time, sessions: 1,
            seq: offset * 1000, reason: offset % 2 == 0 ? nil : .bye))
}

/// The log as an array, appended to by the test.
final class ArrayLog: WebhookEventSource {
    private let entries = Mutex<[LogEntry]>([])

    init(_ offsets: some Sequence<UInt64> = []) { append(offsets) }

    init(entries: [LogEntry]) { self.entries.withLock { $0 = entries } }

    func append(_ offsets: some Sequence<UInt64>) { append(entries: offsets.map(entry)) }

    func append(entries new: [LogEntry]) { entries.withLock { $0.append(contentsOf: new) } }

    func events(after: UInt64, limit: Int) -> [LogEntry] {
        entries.withLock { Array($0.lazy.filter { $0.offset > after }.prefix(limit)) }
    }

    func latestOffset() -> UInt64 { entries.withLock { $0.last?.offset ?? 0 } }

    func count(after: UInt64) -> Int { entries.withLock { $0.count { $0.offset > after } } }

    /// What the test says retention trimmed.
    let trimmed = Atomic<UInt64>(0)

    func trimmedThrough() -> UInt64 { trimmed.load(ordering: .relaxed) }
}
