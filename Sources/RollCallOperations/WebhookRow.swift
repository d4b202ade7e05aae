/// One webhook URL's delivery as the status page shows it (docs/webhooks.md): the operations endpoint knows nothing
/// of delivery itself, the assembly hands it a function that reads these.
public struct WebhookRow: Equatable, Sendable {
    public var url: String
    /// `presence.changed` or `presence.offline_for`.
    public var type: String
    /// The offset of the last entry acknowledged (or skipped).
    public var acknowledged: UInt64
    /// Entries after it, as last counted.
    public var pending: Int
    public var deliveredBatches: Int
    public var skippedBatches: Int
    /// Times retention trimmed entries the URL had not received.
    public var trimmedGaps: Int
    /// Failed attempts of the batch in flight: 0 while the URL is healthy.
    public var failures: Int
    public var lastError: String?
    /// Whether this broker delivers the URL now: on a cluster, one node at a time does.
    public var delivering: Bool
    /// The node that delivers it, on a cluster (`<node>/<lease>`, this one's included); `nil` on a single broker, or
    /// while etcd cannot say.
    public var holder: String?

    public init(
        url: String, type: String, acknowledged: UInt64, pending: Int, deliveredBatches: Int, skippedBatches: Int,
        trimmedGaps: Int = 0, failures: Int, lastError: String?, delivering: Bool = true, holder: String? = nil
    ) {
        self.delivering = delivering
        self.holder = holder
        self.trimmedGaps = trimmedGaps
        self.url = url
        self.type = type
        self.acknowledged = acknowledged
        self.pending = pending
        self.deliveredBatches = deliveredBatches
        self.skippedBatches = skippedBatches
        self.failures = failures
        self.lastError = lastError
    }
}
