import Foundation
import RollCallStore
import RollCallWebhooks
import Testing

@testable import RollCallServer

/// Webhook cursors in the presence log's SQLite file: what a restart reads back.
@Suite struct SQLiteWebhookLogTests {
    /// A batch in flight keeps its bounds and the time of its first attempt; once acknowledged, a restart sees no
    /// batch in flight (the bounds are not after the acknowledged offset), and the next batch's time replaces the
    /// old one.
    @Test func aCursorKeepsItsBatchInFlightAndWhenItWasFirstSent() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(directory: directory)
        let (_, log) = try #require(try store.openLog(keep: true))
        let cursors = SQLiteWebhookLog(log: log)
        let url = "http://127.0.0.1:9/hook"
        #expect(try cursors.cursor(for: url) == nil)

        try cursors.save(
            WebhookCursor(acknowledged: 10, unacknowledgedThrough: 30, unacknowledgedSince: 1_700_000_000), for: url)
        #expect(
            try SQLiteWebhookLog(log: log).cursor(for: url)
                == WebhookCursor(acknowledged: 10, unacknowledgedThrough: 30, unacknowledgedSince: 1_700_000_000))

        try cursors.save(WebhookCursor(acknowledged: 30), for: url)
        let acknowledged = try #require(try cursors.cursor(for: url))
        #expect(acknowledged.acknowledged == 30 && acknowledged.unacknowledgedThrough == 30)

        try cursors.save(
            WebhookCursor(acknowledged: 30, unacknowledgedThrough: 45, unacknowledgedSince: 1_700_000_600), for: url)
        #expect(try cursors.cursor(for: url)?.unacknowledgedSince == 1_700_000_600)
        // Another URL's rows are its own.
        #expect(try cursors.cursor(for: url + "2") == nil)
    }
}
