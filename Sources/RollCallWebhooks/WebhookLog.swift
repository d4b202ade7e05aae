import RollCallCore
import Synchronization

/// Where delivery reads the presence log from: the broker's SQLite log in production, an array in unit tests.
///
/// Delivery calls it from its own tasks, never from the broker's event loop; each call should be a short read.
public protocol WebhookEventSource: Sendable {
    /// The entries with an offset greater than `after`, in offset order, at most `limit` of them (fewer, or none,
    /// when fewer are there).
    func events(after: UInt64, limit: Int) throws -> [LogEntry]
    /// The offset of the newest entry, 0 if the log is empty: where a URL without a cursor starts, so that it gets
    /// only what comes after it was first configured.
    func latestOffset() throws -> UInt64
    /// How many entries have an offset greater than `after`: the pending-events gauge. Read at most once a second
    /// per URL; it may be an estimate.
    func count(after: UInt64) throws -> Int
    /// Entries at or below this offset may have been trimmed by retention: a URL whose cursor is below it may have
    /// missed some (reported, not silent). Read at most once a second per URL; 0 if nothing is ever trimmed.
    func trimmedThrough() throws -> UInt64
}

extension WebhookEventSource {
    /// Nothing is trimmed: a source that keeps everything (tests, `presence.offline_for`'s decisions).
    public func trimmedThrough() throws -> UInt64 { 0 }
}

/// A URL's place in the log: what it acknowledged, and the bounds of the batch sent and not yet acknowledged.
public struct WebhookCursor: Equatable, Sendable {
    /// The offset of the last entry the URL acknowledged (or that was skipped after the retry window): delivery
    /// goes on after it.
    public var acknowledged: UInt64
    /// The offset of the last entry of the batch sent and not yet acknowledged, if any. After a restart that batch
    /// is sent again with the same bounds, and so with the same `webhook-id`.
    public var unacknowledgedThrough: UInt64?
    /// When that batch was first sent, in Unix seconds: its retry window counts from there, across restarts.
    public var unacknowledgedSince: Int64?

    public init(acknowledged: UInt64, unacknowledgedThrough: UInt64? = nil, unacknowledgedSince: Int64? = nil) {
        self.acknowledged = acknowledged
        self.unacknowledgedThrough = unacknowledgedThrough
        self.unacknowledgedSince = unacknowledgedSince
    }
}

/// Where each URL's cursor is kept: durably, in the same SQLite file as the log in production, so that a broker
/// stopped or killed resumes after the last acknowledged batch.
///
/// `save` is called before a batch is first sent (with its bounds) and after it is acknowledged or skipped; a
/// `save` that throws stops that URL's delivery until the next try (logged), it never skips anything.
public protocol WebhookCursorStore: Sendable {
    /// The cursor saved for `url`, `nil` if none was (a URL configured for the first time).
    func cursor(for url: String) throws -> WebhookCursor?
    func save(_ cursor: WebhookCursor, for url: String) throws
    /// Whether this broker delivers `url` now, and which node does. A node of a cluster delivers a URL only while it
    /// holds the URL in etcd (docs/webhooks.md, "On a cluster"): the others wait, and one that takes the URL (over,
    /// or back) starts from the cursor the last holder saved. Asked once a second, whether this broker delivers the
    /// URL or not. A store that may refuse must fence its saves itself: a `save` that throws
    /// ``WebhookDeliveryFenced`` before a batch keeps the batch from being sent, and stops delivery until this asks
    /// again.
    func deliveryRight(for url: String) -> DeliveryRight
}

extension WebhookCursorStore {
    /// A single broker delivers every URL, all along.
    public func deliveryRight(for url: String) -> DeliveryRight { .always }
}

/// A cursor store's answer to "may this broker deliver the URL now?".
public struct DeliveryRight: Equatable, Sendable {
    /// While this broker delivers the URL, a number that changes each time it takes the URL anew; `nil` while it
    /// does not (another node does, or the store cannot say).
    public var term: UInt64?
    /// The node that delivers the URL as the store last saw it (a cluster node's `<node>/<lease>`, this one's
    /// included); `nil` on a single broker, or while the store cannot say.
    public var holder: String?

    public init(term: UInt64?, holder: String? = nil) {
        self.term = term
        self.holder = holder
    }

    /// A single broker's: it delivers every URL, all along.
    public static let always = DeliveryRight(term: 0)
    /// Nobody here delivers, and the store cannot say who does.
    public static let unknown = DeliveryRight(term: nil)
}

/// A cursor store's answer to a save by a broker that no longer delivers the URL (another node of a cluster holds
/// it): the batch is not sent, and delivery starts again from the holder's cursor once this broker holds the URL.
public struct WebhookDeliveryFenced: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Cursors kept in memory: a broker that keeps nothing (`--ephemeral`, test mode) and tests.
public final class MemoryCursorStore: WebhookCursorStore {
    private let cursors = Mutex<[String: WebhookCursor]>([:])

    public init() {}

    public func cursor(for url: String) -> WebhookCursor? { cursors.withLock { $0[url] } }

    public func save(_ cursor: WebhookCursor, for url: String) { cursors.withLock { $0[url] = cursor } }
}
