import RollCallBroker
import RollCallCluster
import RollCallWebhooks

/// Webhook delivery's cursors on a node of a cluster (docs/webhooks.md, "On a cluster"): one node delivers each URL
/// at a time, the one whose lease holds the URL's key in etcd, and each URL's cursor is kept in etcd, so that the node
/// that takes the URL over (once the last one's lease ran out) continues where it stopped. Every node's log has the
/// same offsets (docs/history.md, "On a cluster"), so a cursor means the same on every node.
///
/// - `owner/<url>`: the delivering node's incarnation, put under its lease; taken by the first node that asks while
///   it is absent, and gone with that node's lease.
/// - `cursor/<url>`: the URL's ``WebhookCursor``, written only while the writer holds `owner/<url>` (one
///   transaction), so that a node that lost the URL cannot move it.
///
/// Each call is one etcd round trip (two to take a URL), on delivery's store queue: a URL asks before each batch it
/// sends, and saves its cursor before and after.
final class ClusterWebhookCursors: WebhookCursorStore {
    private let client: EtcdClient
    private let prefix: String
    /// The node's incarnation while it may serve; `nil` outside its window (it then delivers nothing).
    private let incarnation: @Sendable () -> ClusterKeys.Incarnation?

    init(settings: ClusterSettings, incarnation: @escaping @Sendable () -> ClusterKeys.Incarnation?) {
        client = EtcdClient(
            endpoints: settings.endpoints, requestTimeout: .milliseconds(settings.requestTimeoutMilliseconds))
        prefix = settings.prefix + "webhooks/"
        self.incarnation = incarnation
    }

    deinit { client.shutdown() }

    private func ownerKey(_ url: String) -> String { prefix + "owner/" + url }
    private func cursorKey(_ url: String) -> String { prefix + "cursor/" + url }

    /// The owner key's create revision as the term while this node holds it (taking it if it is absent): a key
    /// taken anew (over, or back after another node held it) has a new one. The holder is the key's value, the
    /// holding node's incarnation.
    func deliveryRight(for url: String) -> DeliveryRight {
        guard let me = incarnation() else { return .unknown }
        let owner = ownerKey(url)
        do {
            if let held = try client.range(owner).kvs.first {
                let mine = held.value == me.description
                return DeliveryRight(term: mine ? UInt64(max(0, held.createRevision)) : nil, holder: held.value)
            }
            let taken = try client.txn(
                compare: [.absent(owner)], success: [.put(key: owner, value: me.description, lease: me.lease)])
            // Taken by another node in between: who, the next ask reads.
            return taken.succeeded
                ? DeliveryRight(term: UInt64(max(0, taken.revision)), holder: me.description) : .unknown
        } catch {
            return .unknown  // etcd cannot say: deliver nothing rather than risk two nodes at once
        }
    }

    func cursor(for url: String) throws -> WebhookCursor? {
        guard let value = try client.range(cursorKey(url)).kvs.first?.value else { return nil }
        guard let cursor = Self.decode(value) else {
            throw ClusterWebhookError("the cursor of \(url) in etcd cannot be read: '\(value)'")
        }
        return cursor
    }

    /// Saves `cursor` if this node still holds the URL; else, or if etcd cannot say, throws
    /// ``WebhookDeliveryFenced``: a batch whose bounds were not saved is not sent (the next holder would not know
    /// to send it again under the same id).
    func save(_ cursor: WebhookCursor, for url: String) throws {
        guard let me = incarnation() else { throw WebhookDeliveryFenced("this node is outside its window") }
        let saved: EtcdTxnResult
        do {
            saved = try client.txn(
                compare: [EtcdCompare(key: ownerKey(url), .equal, .value(me.description))],
                success: [.put(key: cursorKey(url), value: Self.encode(cursor), lease: 0)])
        } catch {
            throw WebhookDeliveryFenced("etcd did not take the cursor: \(error)")
        }
        guard saved.succeeded else { throw WebhookDeliveryFenced("another node delivers \(url) now") }
    }

    /// `acknowledged;unacknowledgedThrough;unacknowledgedSince`, the last two empty when absent.
    static func encode(_ cursor: WebhookCursor) -> String {
        "\(cursor.acknowledged);\(cursor.unacknowledgedThrough.map(String.init) ?? "");"
            + (cursor.unacknowledgedSince.map(String.init) ?? "")
    }

    static func decode(_ value: String) -> WebhookCursor? {
        let fields = value.split(separator: ";", omittingEmptySubsequences: false)
        guard fields.count == 3, let acknowledged = UInt64(fields[0]) else { return nil }
        let through = fields[1].isEmpty ? nil : UInt64(fields[1])
        let since = fields[2].isEmpty ? nil : Int64(fields[2])
        guard fields[1].isEmpty || through != nil, fields[2].isEmpty || since != nil else { return nil }
        return WebhookCursor(acknowledged: acknowledged, unacknowledgedThrough: through, unacknowledgedSince: since)
    }
}

/// Why a cluster's webhook cursor could not be read or saved.
struct ClusterWebhookError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
