import RollCallCore

/// Which offline transitions earn a `presence.offline_for` (docs/webhooks.md): an offline record (time t) of a user
/// whose next entry in the log does not come before t + N. Decided from the log alone, so that the same log gives
/// the same decisions after a restart; the broker's clock only says when "nothing came yet" is final.
///
/// Fed the log's entries in offset order (which is the broker clock's order), it keeps the offline entries seen and
/// marks one cancelled when the same user's next entry came before its deadline. A later entry, whatever its seq,
/// fences the event: a reconnection racing the deadline cancels it as long as it is in the log before the decision.
public struct OfflineForDecider: Sendable {
    /// N, in milliseconds.
    public let offlineAfter: Int64
    private var candidates: [(entry: LogEntry, cancelled: Bool)] = []
    /// Each user's latest offline candidate, while a later entry of theirs could still cancel it.
    private var open: [UserID: Int] = [:]
    /// The broker time of the newest entry fed.
    private var newest: BrokerTime?

    public init(offlineAfter: Int64) { self.offlineAfter = offlineAfter }

    /// Entries after those fed before, in offset order.
    public mutating func feed(_ entries: some Sequence<LogEntry>) {
        for entry in entries {
            newest = entry.time
            let user = entry.record.user
            if let index = open.removeValue(forKey: user),
                entry.time < candidates[index].entry.time + offlineAfter
            {
                candidates[index].cancelled = true
            }
            if entry.record.status == .offline {
                candidates.append((entry, false))
                open[user] = candidates.count - 1
            }
        }
    }

    /// The offline entries decided "send", in offset order, up to the first one not decided yet, at most `limit`.
    ///
    /// A candidate is decided once an entry at or after its deadline was fed (every entry before the deadline was
    /// fed then), or when `complete` (the log was read to its end) and the broker time `now` is at least the
    /// deadline plus `settle` (the longest a transition takes to reach the log).
    public func due(now: BrokerTime, complete: Bool, settle: Int64, limit: Int) -> [LogEntry] {
        var due: [LogEntry] = []
        for candidate in candidates where !candidate.cancelled {
            let deadline = candidate.entry.time + offlineAfter
            let decided = (newest.map { $0 >= deadline } ?? false) || (complete && now >= deadline + settle)
            guard decided, due.count < limit else { break }
            due.append(candidate.entry)
        }
        return due
    }
}

/// The `presence.offline_for` stream as a ``WebhookEventSource`` over the log: its "events" are the offline entries
/// decided "send", so that one ``DeliveryMachine`` per URL delivers them with the same retries, cursor and order as
/// the transitions (a cursor of its own, kept under ``cursorKey(for:)``).
public struct OfflineForSource: WebhookEventSource {
    public let log: any WebhookEventSource
    public let offlineAfter: Int64
    /// How long a transition may take to reach the log after it was made, in ms: a decision waits that much more.
    public let settle: Int64
    /// The broker's clock (test mode's moves only by `advance`).
    public let now: @Sendable () -> BrokerTime
    /// The most log entries one read scans: a busy log's window of N ms may take several reads.
    public var scanLimit = 10_000

    public init(
        log: any WebhookEventSource, offlineAfter: Int64, settle: Int64, now: @escaping @Sendable () -> BrokerTime
    ) {
        self.log = log
        self.offlineAfter = offlineAfter
        self.settle = settle
        self.now = now
    }

    /// The cursor store's key of `url`'s `presence.offline_for` stream (a URL holds no space).
    public static func cursorKey(for url: String) -> String { "\(url) offline_for" }

    public func events(after: UInt64, limit: Int) throws -> [LogEntry] {
        var decider = OfflineForDecider(offlineAfter: offlineAfter)
        var position = after
        var scanned = 0
        let page = 1_000
        while scanned < scanLimit {
            let entries = try log.events(after: position, limit: page)
            decider.feed(entries)
            scanned += entries.count
            guard entries.count == page, let last = entries.last else {
                return decider.due(now: now(), complete: true, settle: settle, limit: limit)
            }
            position = last.offset
        }
        return decider.due(now: now(), complete: false, settle: settle, limit: limit)
    }

    public func latestOffset() throws -> UInt64 { try log.latestOffset() }

    /// Not counted: the pending gauge is the transitions'.
    public func count(after: UInt64) throws -> Int { 0 }
}
