import RollCallBroker
import RollCallCluster
import RollCallWebhooks
import Synchronization

/// Webhook delivery's cursors on a node of a cluster (docs/webhooks.md, "On a cluster"): one node delivers each URL
/// at a time, the one whose lease holds the URL's key in etcd, and each URL's cursor is kept in etcd, so that the node
/// that takes the URL over (once the last one's lease ran out) continues where it stopped. Every node's log has the
/// same offsets (docs/history.md, "On a cluster"), so a cursor means the same on every node.
///
/// - `owner/<url>`: the delivering node's incarnation, put under its lease; taken by the first node that asks while
///   it is absent, and gone with that node's lease.
/// - `cursor/<url>`: the URL's ``WebhookCursor``, written only while the writer holds `owner/<url>` as it took it
///   (one transaction comparing the key's value and create revision), so that a node that lost the URL, even if it
///   took it back since, cannot move it with what it knew before.
///
/// Each call is one etcd round trip (two to take a URL), on delivery's store queue: a URL saves its cursor before
/// and after each batch, and asks once a second.
final class ClusterWebhookCursors: WebhookCursorStore {
    private let client: EtcdClient
    private let prefix: String
    /// The node's incarnation while it may serve; `nil` outside its window (it then delivers nothing).
    private let incarnation: @Sendable () -> ClusterKeys.Incarnation?
    /// The owner key's create revision when this node last took or found it holding each URL: its saves hold only
    /// while the key is still that one.
    private let terms = Mutex<[String: Int64]>([:])

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
    /// holding node's incarnation. Outside its window the node asks etcd nothing (it cannot say who delivers): so
    /// that delivery made before the node starts, and a node cut off from etcd, wait on nothing.
    func deliveryRight(for url: String) -> DeliveryRight {
        guard let me = incarnation() else { return .unknown }
        let owner = ownerKey(url)
        do {
            if let held = try client.range(owner).kvs.first {
                guard held.value == me.description else { return DeliveryRight(term: nil, holder: held.value) }
                return granted(held.createRevision, for: url, to: me)
            }
            let taken = try client.txn(
                compare: [.absent(owner)], success: [.put(key: owner, value: me.description, lease: me.lease)])
            if taken.succeeded { return granted(taken.revision, for: url, to: me) }
            // Taken by another node in between: which one.
            return DeliveryRight(term: nil, holder: try client.range(owner).kvs.first?.value)
        } catch {
            return .unknown  // etcd cannot say: deliver nothing rather than risk two nodes at once
        }
    }

    /// This node holds `url` under the owner key created at `revision`: the term its saves are fenced with.
    private func granted(
        _ revision: Int64, for url: String, to me: ClusterKeys.Incarnation
    ) -> DeliveryRight {
        terms.withLock { $0[url] = revision }
        return DeliveryRight(term: UInt64(max(0, revision)), holder: me.description)
    }

    func cursor(for url: String) throws -> WebhookCursor? {
        guard let value = try client.range(cursorKey(url)).kvs.first?.value else { return nil }
        guard let cursor = Self.decode(value) else {
            throw ClusterWebhookError("the cursor of \(url) in etcd cannot be read: '\(value)'")
        }
        return cursor
    }

    /// Saves `cursor` if this node still holds the URL as it last took it (the same owner key: a key taken back
    /// since has another create revision, and another holder may have moved the cursor meanwhile); else, or if etcd
    /// cannot say, throws ``WebhookDeliveryFenced``: a batch whose bounds were not saved is not sent (the next holder
    /// would not know to send it again under the same id).
    func save(_ cursor: WebhookCursor, for url: String) throws {
        guard let me = incarnation() else { throw WebhookDeliveryFenced("this node is outside its window") }
        guard let term = terms.withLock({ $0[url] }) else { throw WebhookDeliveryFenced("this node never took \(url)") }
        let saved: EtcdTxnResult
        do {
            let owner = ownerKey(url)
            saved = try client.txn(
                compare: [
                    EtcdCompare(key: owner, .equal, .value(me.description)),
                    EtcdCompare(key: owner, .equal, .createRevision(term)),
                ],
                success: [.put(key: cursorKey(url), value: Self.encode(cursor), lease: 0)])
        } catch {
            throw WebhookDeliveryFenced("etcd did not take the cursor: \(error)")
        }
        guard saved.succeeded else {
            throw WebhookDeliveryFenced("another node delivers \(url) now, or this node took it anew since")
        }
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
