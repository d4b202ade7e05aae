import RollCallCore
import RollCallStore
import RollCallWebhooks

/// Webhook delivery's view of the broker's presence log (docs/webhooks.md): the entries from the log's own read
/// connection (only what the store's writer has committed, so a delivered offset can never be lost by a crash),
/// and each URL's cursor in the log's `webhook_cursors` table.
///
/// A ``WebhookCursor`` takes two rows: the acknowledged offset under the URL, and the last offset of the batch in
/// flight under `"<url> in_flight"`. Both only grow (the table keeps the larger value), which is what they do: after
/// an acknowledgement the two are equal, and a restart sees no batch in flight.
struct SQLiteWebhookLog: WebhookEventSource, WebhookCursorStore {
    let log: PresenceLog

    func events(after: UInt64, limit: Int) throws -> [LogEntry] { try log.events(after: after, limit: limit) }

    func latestOffset() throws -> UInt64 { try log.state().lastOffset }

    func count(after: UInt64) throws -> Int { try log.count(after: after) }

    func cursor(for url: String) throws -> WebhookCursor? {
        guard let acknowledged = try log.webhookCursor(for: url) else { return nil }
        return WebhookCursor(
            acknowledged: acknowledged, unacknowledgedThrough: try log.webhookCursor(for: Self.inFlightKey(url)))
    }

    func save(_ cursor: WebhookCursor, for url: String) throws {
        if let through = cursor.unacknowledgedThrough {
            try log.saveWebhookCursor(through, for: Self.inFlightKey(url))
        }
        try log.saveWebhookCursor(cursor.acknowledged, for: url)
    }

    /// Where the bounds of `url`'s batch in flight are kept (a URL holds no space).
    static func inFlightKey(_ url: String) -> String { "\(url) in_flight" }
}
