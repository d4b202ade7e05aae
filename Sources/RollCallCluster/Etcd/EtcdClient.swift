import Foundation
import Synchronization

/// A small, blocking client of etcd v3's JSON gateway: leases, puts, deletes, transactions and range reads. Each
/// call blocks its caller until etcd answers or the deadline passes, so it belongs on a thread of its own (the
/// cluster's worker), never on the event loop. HTTP is async-http-client's, on NIO's shared event loops (see
/// ``EtcdGateway``).
///
/// A call goes to the preferred member and moves on to the next, for this call and the later ones, when that member
/// is unreachable, does not answer in time (``requestTimeout`` per attempt, connection included), or answers that
/// it cannot serve (no leader, 5xx): one attempt per member per call. Calls may come from several threads at once.
/// Watches have their own thread and share the client's connections' pool: ``watch(prefix:from:handler:)``.
///
/// ``shutdown()`` closes the connections when the owner stops (cancel the watches first); a client dropped without
/// it closes them in the background.
public final class EtcdClient: Sendable {
    public let endpoints: [EtcdEndpoint]
    /// How long one attempt at one member may take, connection included.
    public let requestTimeout: Duration

    private let gateway: EtcdGateway
    /// The index of the member the next call tries first.
    private let preferred = Atomic<Int>(0)

    /// `endpoints` must not be empty.
    public init(endpoints: [EtcdEndpoint], requestTimeout: Duration = .seconds(1)) {
        precondition(!endpoints.isEmpty, "an etcd client needs at least one endpoint")
        self.endpoints = endpoints
        self.requestTimeout = requestTimeout
        gateway = EtcdGateway(connectTimeout: requestTimeout)
    }

    /// Closes every connection, the watches' included, and returns when that is done; calls after it fail with
    /// ``EtcdError/unreachable(_:_:)``. Call it where the owner stops, after cancelling the watches.
    public func shutdown() { gateway.shutdown() }

    /// The member the client talks to now (or will try first).
    public var currentEndpoint: EtcdEndpoint { endpoints[preferred.load(ordering: .relaxed)] }

    // MARK: - Leases

    /// Grants a lease of `ttlSeconds`.
    public func grant(ttlSeconds: Int64) throws -> EtcdLease {
        let reply = try call("/v3/lease/grant", ["TTL": String(ttlSeconds)])
        if let error = reply["error"] as? String, !error.isEmpty { throw EtcdError.protocolError(error) }
        return EtcdLease(id: EtcdJSON.int64(reply["ID"]), ttlSeconds: EtcdJSON.int64(reply["TTL"]))
    }

    /// Renews `lease` once; returns the time to live it has again, in seconds. Throws
    /// ``EtcdError/leaseNotFound(_:)`` when it has expired or was revoked (etcd then answers with no TTL).
    @discardableResult
    public func keepAlive(lease: Int64) throws -> Int64 {
        let reply = try call("/v3/lease/keepalive", ["ID": String(lease)])
        let result = reply["result"] as? [String: Any] ?? reply
        let ttl = EtcdJSON.int64(result["TTL"])
        guard ttl > 0 else { throw EtcdError.leaseNotFound(lease) }
        return ttl
    }

    /// Revokes `lease`, deleting every key attached to it, at once.
    public func revoke(lease: Int64) throws {
        do {
            _ = try call("/v3/lease/revoke", ["ID": String(lease)])
        } catch EtcdError.http(let status, let body) where status == 404 || body.contains("lease not found") {
            throw EtcdError.leaseNotFound(lease)
        }
    }

    // MARK: - Keys

    /// Sets `key` to `value`, attached to `lease` unless it is 0; returns the new revision.
    @discardableResult
    public func put(_ key: String, _ value: String, lease: Int64 = 0) throws -> Int64 {
        var request: [String: Any] = ["key": EtcdJSON.base64(key), "value": EtcdJSON.base64(value)]
        if lease != 0 { request["lease"] = String(lease) }
        do {
            return EtcdJSON.revision(try call("/v3/kv/put", request))
        } catch EtcdError.http(_, let body) where body.contains("requested lease not found") {
            throw EtcdError.leaseNotFound(lease)
        }
    }

    /// Deletes `key`, or every key under it when `prefix`; returns the revision after it.
    @discardableResult
    public func delete(_ key: String, prefix: Bool = false) throws -> Int64 {
        var request: [String: Any] = ["key": EtcdJSON.base64(key)]
        if prefix { request["range_end"] = EtcdJSON.prefixEnd(key) }
        return EtcdJSON.revision(try call("/v3/kv/deleterange", request))
    }

    /// Runs `success` if every condition in `compare` holds, else `failure`, atomically.
    public func txn(
        compare: [EtcdCompare], success: [EtcdOperation], failure: [EtcdOperation] = []
    ) throws -> EtcdTxnResult {
        let request: [String: Any] = [
            "compare": compare.map(EtcdJSON.compare),
            "success": success.map(EtcdJSON.operation),
            "failure": failure.map(EtcdJSON.operation),
        ]
        do {
            let reply = try call("/v3/kv/txn", request)
            return EtcdTxnResult(succeeded: reply["succeeded"] as? Bool ?? false, revision: EtcdJSON.revision(reply))
        } catch EtcdError.http(_, let body) where body.contains("requested lease not found") {
            throw EtcdError.leaseNotFound(0)
        }
    }

    /// Reads `key`, or the keys under it when `prefix`, in key order, at `revision` (0: the latest), at most `limit`
    /// of them (0: all). Throws ``EtcdError/compacted(compactRevision:)`` for a revision etcd no longer keeps.
    public func range(_ key: String, prefix: Bool = false, revision: Int64 = 0, limit: Int = 0) throws -> EtcdRange {
        try range(
            from: EtcdJSON.base64(key), end: prefix ? EtcdJSON.prefixEnd(key) : nil, revision: revision, limit: limit)
    }

    /// Every key under `prefix` at one revision, read in pages of `pageSize` (all at the revision of the first page,
    /// so the whole is one consistent snapshot).
    public func snapshot(prefix: String, pageSize: Int = 1_000) throws -> EtcdRange {
        let end = EtcdJSON.prefixEnd(prefix)
        var page = try range(from: EtcdJSON.base64(prefix), end: end, revision: 0, limit: pageSize)
        var all = page
        while page.more, let last = page.kvs.last {
            // The next page starts just after the last key: the key with a zero byte appended.
            let next = Data(last.key.utf8 + [0]).base64EncodedString()
            page = try range(from: next, end: end, revision: all.revision, limit: pageSize)
            all.kvs += page.kvs
        }
        all.more = false
        return all
    }

    /// Compacts the history up to `revision`: watches and reads from before it fail with
    /// ``EtcdError/compacted(compactRevision:)`` from then on. For tests and operators.
    public func compact(revision: Int64) throws {
        _ = try call("/v3/kv/compaction", ["revision": String(revision), "physical": true])
    }

    /// Starts a watch of every key under `prefix` from `revision` on a thread of its own; `handler` gets what it
    /// sees, on that thread. See ``EtcdWatch``.
    public func watch(
        prefix: String, from revision: Int64, handler: @escaping @Sendable (EtcdWatch.Update) -> Void
    ) -> EtcdWatch {
        EtcdWatch(
            gateway: gateway, endpoints: endpoints, first: preferred.load(ordering: .relaxed), prefix: prefix,
            from: revision, connectTimeout: requestTimeout, handler: handler)
    }

    // MARK: - Calls

    private func range(from key: String, end: String?, revision: Int64, limit: Int) throws -> EtcdRange {
        var request: [String: Any] = ["key": key]
        if let end { request["range_end"] = end }
        if revision > 0 { request["revision"] = String(revision) }
        if limit > 0 { request["limit"] = String(limit) }
        let reply: [String: Any]
        do {
            reply = try call("/v3/kv/range", request)
        } catch EtcdError.http(_, let body) where body.contains("required revision has been compacted") {
            throw EtcdError.compacted(compactRevision: 0)
        }
        let kvs = (reply["kvs"] as? [Any] ?? []).map(EtcdJSON.keyValue)
        return EtcdRange(revision: EtcdJSON.revision(reply), kvs: kvs, more: reply["more"] as? Bool ?? false)
    }

    /// Sends one request, trying each member once, starting with the preferred one.
    private func call(_ path: String, _ request: [String: Any]) throws -> [String: Any] {
        let body = EtcdJSON.encode(request)
        var member = preferred.load(ordering: .relaxed)
        var lastError = EtcdError.unreachable(endpoints[member].description, "not tried")
        for _ in endpoints.indices {
            do {
                let (status, reply) = try gateway.post(path, body: body, to: endpoints[member], timeout: requestTimeout)
                guard status == 200 else {
                    throw EtcdError.http(status: status, String(decoding: reply, as: UTF8.self))
                }
                return try EtcdJSON.decode(reply)
            } catch let error as EtcdError where error.isUnavailable {
                lastError = error
                let next = (member + 1) % endpoints.count
                // The later calls start on the next member too, unless a concurrent call moved them on already.
                _ = preferred.compareExchange(expected: member, desired: next, ordering: .relaxed)
                member = next
            }
        }
        throw lastError
    }
}
