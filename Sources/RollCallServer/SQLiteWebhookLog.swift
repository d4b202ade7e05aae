import RollCallCore
import RollCallStore
import RollCallWebhooks

/// Webhook delivery's view of the broker's presence log (docs/webhooks.md): the entries from the log's own read
/// connection (only what the store's writer has committed, so a delivered offset can never be lost by a crash),
/// and each URL's cursor in the log's `webhook_cursors` table.
///
/// A ``WebhookCursor`` takes three rows: the acknowledged offset under the URL, the last offset of the batch in
/// flight under `"<url> in_flight"`, and when that batch was first sent (Unix seconds) under
/// `"<url> in_flight_since"`. All only grow (the table keeps the larger value), which is what they do: after an
/// acknowledgement the first two are equal, so a restart sees no batch in flight, and each new batch is sent later
/// than the one before (on a wall clock that does not step back).
struct SQLiteWebhookLog: WebhookEventSource, WebhookCursorStore {
    let log: PresenceLog

    func events(after: UInt64, limit: Int) throws -> [LogEntry] { try log.events(after: after, limit: limit) }

    func latestOffset() throws -> UInt64 { try log.state().lastOffset }

    func count(after: UInt64) throws -> Int { try log.count(after: after) }

    func trimmedThrough() throws -> UInt64 { try log.state().trimmedThrough }

    func cursor(for url: String) throws -> WebhookCursor? {
        guard let acknowledged = try log.webhookCursor(for: url) else { return nil }
        return WebhookCursor(
            acknowledged: acknowledged, unacknowledgedThrough: try log.webhookCursor(for: Self.inFlightKey(url)),
            unacknowledgedSince: try log.webhookCursor(for: Self.sinceKey(url)).map { Int64(clamping: $0) })
    }

    func save(_ cursor: WebhookCursor, for url: String) throws {
        var rows: [(key: String, value: UInt64)] = []
        if let through = cursor.unacknowledgedThrough { rows.append((Self.inFlightKey(url), through)) }
        if let since = cursor.unacknowledgedSince { rows.append((Self.sinceKey(url), UInt64(max(0, since)))) }
        rows.append((url, cursor.acknowledged))
        try log.saveWebhookCursors(rows)
    }

    /// Where the bounds of `url`'s batch in flight are kept (a URL holds no space).
    static func inFlightKey(_ url: String) -> String { "\(url) in_flight" }
    /// Where the first attempt of `url`'s batch in flight is kept.
    static func sinceKey(_ url: String) -> String { "\(url) in_flight_since" }
}
