import Foundation
import GRPCCore
import Synchronization

/// A small, blocking client of etcd v3's gRPC API: leases, puts, deletes, transactions and range reads. Each call
/// blocks its caller until etcd answers or the deadline passes, so it belongs on a thread of its own (the cluster's
/// worker), never on the event loop. gRPC is grpc-swift-2's over HTTP/2 on NIO's event loops; its tasks run on a
/// thread of the client's own (``EtcdExecutor``).
///
/// A call goes to the preferred member and moves on to the next, for this call and the later ones, when that member
/// is unreachable, does not answer in time (``requestTimeout`` per attempt, connection included), or answers that
/// it cannot serve now (no leader): one attempt per member per call. The connection to a member that failed a call
/// takes no more calls (it closes once those in flight end), and the next call to that member opens a new one: a
/// member that stopped answering may hold what was sent on the old one, and nothing later queues behind it. A
/// connection also makes at most ``EtcdConnection/maxCalls`` calls. Calls may come from several threads at once.
/// Watches have their own threads and connection: ``watch(prefix:from:handler:)``.
///
/// ``shutdown()`` closes the connections when the owner stops (cancel the watches first); a client dropped without
/// it closes them in the background.
public final class EtcdClient: Sendable {
    public let endpoints: [EtcdEndpoint]
    /// How long one attempt at one member may take, connection included.
    public let requestTimeout: Duration

    private let executor = EtcdExecutor(name: "etcd-calls")
    private let state: Mutex<State>
    /// The calls in flight: ``shutdown()`` waits for them (each has a deadline) before it closes the connections.
    private let calls = DispatchGroup()
    /// The index of the member the next call tries first.
    private let preferred = Atomic<Int>(0)

    private struct State {
        /// By member: the connection its next call goes on, if one is open.
        var connections: [EtcdConnection?]
        /// Every connection opened that may not have closed yet.
        var opened: [EtcdConnection] = []
        var closed = false
    }

    /// How long past its deadline a call waits for gRPC to end it before the caller's own deadline does (see
    /// ``EtcdExecutor/run(until:_:)``).
    private static let deadlineGrace: Duration = .milliseconds(200)

    /// `endpoints` must not be empty.
    public init(endpoints: [EtcdEndpoint], requestTimeout: Duration = .seconds(1)) {
        precondition(!endpoints.isEmpty, "an etcd client needs at least one endpoint")
        self.endpoints = endpoints
        self.requestTimeout = requestTimeout
        state = Mutex(State(connections: Array(repeating: nil, count: endpoints.count)))
    }

    deinit {
        // After shutdown() there is nothing left to close (its executor has stopped, or stops soon).
        if let opened = state.withLock({ $0.closed ? nil : $0.opened }) { Self.close(opened, executor: executor) }
    }

    /// Closes every connection once the calls in flight have ended, and returns when that is done (or after one
    /// request timeout, the rest closing in the background); calls after it fail at once with
    /// ``EtcdError/unreachable(_:_:)``. Call it where the owner stops, after cancelling the watches.
    public func shutdown() {
        let first = state.withLock { state in
            defer { state.closed = true }
            return !state.closed
        }
        guard first else { return }
        calls.wait()
        let opened = state.withLock { state in
            defer {
                state.connections = state.connections.map { _ in nil }
                state.opened = []
            }
            return state.opened
        }
        let closed = Self.close(opened, executor: executor)
        _ = closed.wait(timeout: .now() + .milliseconds(Int(requestTimeout / .milliseconds(1))))
    }

    /// Retires `connections` and ends the executor's thread once they are closed (a connection still connecting
    /// closes when its attempt ends); the semaphore is signalled then.
    @discardableResult
    private static func close(_ connections: [EtcdConnection], executor: EtcdExecutor) -> DispatchSemaphore {
        let closed = DispatchSemaphore(value: 0)
        for connection in connections { connection.retire() }
        Task(executorPreference: executor) {
            for connection in connections { await connection.closed() }
            executor.stop()
            closed.signal()
        }
        return closed
    }

    /// The member the client talks to now (or will try first).
    public var currentEndpoint: EtcdEndpoint { endpoints[preferred.load(ordering: .relaxed)] }

    // MARK: - Leases

    /// Grants a lease of `ttlSeconds`.
    public func grant(ttlSeconds: Int64) throws -> EtcdLease {
        let request = Etcdserverpb_LeaseGrantRequest.with { $0.ttl = ttlSeconds }
        let reply = try call { client, options in
            try await Etcdserverpb_Lease.Client(wrapping: client).leaseGrant(request, options: options)
        }
        if !reply.error.isEmpty { throw EtcdError.protocolError(reply.error) }
        return EtcdLease(id: reply.id, ttlSeconds: reply.ttl)
    }

    /// Renews `lease` once; returns the time to live it has again, in seconds. Throws
    /// ``EtcdError/leaseNotFound(_:)`` when it has expired or was revoked (etcd then answers with no TTL).
    ///
    /// etcd renews leases on a stream only: the call opens one, sends the lease's id, reads the answer and closes it.
    @discardableResult
    public func keepAlive(lease: Int64) throws -> Int64 {
        let request = Etcdserverpb_LeaseKeepAliveRequest.with { $0.id = lease }
        let ttl = try call { client, options in
            try await Etcdserverpb_Lease.Client(wrapping: client).leaseKeepAlive(
                options: options, requestProducer: { try await $0.write(request) },
                onResponse: { response in
                    for try await reply in response.messages { return reply.ttl }
                    throw EtcdError.protocolError("the keep-alive stream ended without an answer")
                })
        }
        guard ttl > 0 else { throw EtcdError.leaseNotFound(lease) }
        return ttl
    }

    /// Revokes `lease`, deleting every key attached to it, at once.
    public func revoke(lease: Int64) throws {
        let request = Etcdserverpb_LeaseRevokeRequest.with { $0.id = lease }
        try leaseCall(lease) { client, options in
            _ = try await Etcdserverpb_Lease.Client(wrapping: client).leaseRevoke(request, options: options)
        }
    }

    // MARK: - Keys

    /// Sets `key` to `value`, attached to `lease` unless it is 0; returns the new revision.
    @discardableResult
    public func put(_ key: String, _ value: String, lease: Int64 = 0) throws -> Int64 {
        let request = EtcdProtobuf.put(key, value, lease: lease)
        return try leaseCall(lease) { client, options in
            try await Etcdserverpb_KV.Client(wrapping: client).put(request, options: options).header.revision
        }
    }

    /// Deletes `key`, or every key under it when `prefix`; returns the revision after it.
    @discardableResult
    public func delete(_ key: String, prefix: Bool = false) throws -> Int64 {
        let request = EtcdProtobuf.delete(key, prefix: prefix)
        return try call { client, options in
            try await Etcdserverpb_KV.Client(wrapping: client).deleteRange(request, options: options).header.revision
        }
    }

    /// Runs `success` if every condition in `compare` holds, else `failure`, atomically.
    public func txn(
        compare: [EtcdCompare], success: [EtcdOperation], failure: [EtcdOperation] = []
    ) throws -> EtcdTxnResult {
        let request = Etcdserverpb_TxnRequest.with {
            $0.compare = compare.map(EtcdProtobuf.compare)
            $0.success = success.map(EtcdProtobuf.operation)
            $0.failure = failure.map(EtcdProtobuf.operation)
        }
        let reply = try leaseCall(0) { client, options in
            try await Etcdserverpb_KV.Client(wrapping: client).txn(request, options: options)
        }
        return EtcdTxnResult(succeeded: reply.succeeded, revision: reply.header.revision)
    }

    /// Reads `key`, or the keys under it when `prefix`, in key order, at `revision` (0: the latest), at most `limit`
    /// of them (0: all). Throws ``EtcdError/compacted(compactRevision:)`` for a revision etcd no longer keeps.
    public func range(_ key: String, prefix: Bool = false, revision: Int64 = 0, limit: Int = 0) throws -> EtcdRange {
        try range(
            from: Data(key.utf8), end: prefix ? EtcdProtobuf.prefixEnd(key) : Data(), revision: revision, limit: limit)
    }

    /// Every key under `prefix` at one revision, read in pages of `pageSize` (all at the revision of the first page,
    /// so the whole is one consistent snapshot).
    public func snapshot(prefix: String, pageSize: Int = 1_000) throws -> EtcdRange {
        let end = EtcdProtobuf.prefixEnd(prefix)
        var page = try range(from: Data(prefix.utf8), end: end, revision: 0, limit: pageSize)
        var all = page
        while page.more, let last = page.kvs.last {
            // The next page starts just after the last key: the key with a zero byte appended.
            page = try range(from: Data(last.key.utf8 + [0]), end: end, revision: all.revision, limit: pageSize)
            all.kvs += page.kvs
        }
        all.more = false
        return all
    }

    /// Compacts the history up to `revision`: watches and reads from before it fail with
    /// ``EtcdError/compacted(compactRevision:)`` from then on. For tests and operators.
    public func compact(revision: Int64) throws {
        let request = Etcdserverpb_CompactionRequest.with {
            $0.revision = revision
            $0.physical = true
        }
        _ = try call { client, options in
            try await Etcdserverpb_KV.Client(wrapping: client).compact(request, options: options)
        }
    }

    /// Starts a watch of every key under `prefix` from `revision` on a thread of its own; `handler` gets what it
    /// sees, on that thread. See ``EtcdWatch``.
    public func watch(
        prefix: String, from revision: Int64, handler: @escaping @Sendable (EtcdWatch.Update) -> Void
    ) -> EtcdWatch {
        EtcdWatch(
            endpoints: endpoints, first: preferred.load(ordering: .relaxed), prefix: prefix, from: revision,
            connectTimeout: requestTimeout, handler: handler)
    }

    // MARK: - Calls

    private func range(from key: Data, end: Data, revision: Int64, limit: Int) throws -> EtcdRange {
        let request = Etcdserverpb_RangeRequest.with {
            $0.key = key
            $0.rangeEnd = end
            $0.revision = revision
            $0.limit = Int64(limit)
        }
        let reply = try call { client, options in
            try await Etcdserverpb_KV.Client(wrapping: client).range(request, options: options)
        }
        return EtcdRange(
            revision: reply.header.revision, kvs: reply.kvs.map(EtcdProtobuf.keyValue), more: reply.more)
    }

    /// ``call(_:)`` for a request that names `lease`: etcd's "lease not found" becomes
    /// ``EtcdError/leaseNotFound(_:)``.
    private func leaseCall<Reply: Sendable>(
        _ lease: Int64,
        _ body: @escaping @Sendable (GRPCClient<EtcdConnection.Transport>, CallOptions) async throws -> Reply
    ) throws -> Reply {
        do {
            return try call(body)
        } catch let error as EtcdError where error.isLeaseNotFound {
            throw EtcdError.leaseNotFound(lease)
        }
    }

    /// Makes one call, trying each member once, starting with the preferred one.
    private func call<Reply: Sendable>(
        _ body: @escaping @Sendable (GRPCClient<EtcdConnection.Transport>, CallOptions) async throws -> Reply
    ) throws -> Reply {
        var member = preferred.load(ordering: .relaxed)
        var lastError = EtcdError.unreachable(endpoints[member].description, "not tried")
        let options = EtcdConnection.options(timeout: requestTimeout)
        for _ in endpoints.indices {
            let connection = try beginCall(on: member)
            let outcome: Result<Reply, EtcdError>
            do {
                let deadline = ContinuousClock.now + requestTimeout + Self.deadlineGrace
                outcome = .success(try executor.run(until: deadline) { try await body(connection.client, options) })
            } catch is EtcdExecutor.DeadlinePassed {
                outcome = .failure(.timedOut(connection.endpoint.description))
            } catch {
                outcome = .failure(EtcdError(error, member: connection.endpoint))
            }
            connection.endCall()
            calls.leave()
            switch outcome {
            case .success(let reply):
                return reply
            case .failure(let reason):
                guard reason.isUnavailable else { throw reason }
                lastError = reason
                drop(connection, of: member)
                let next = (member + 1) % endpoints.count
                // The later calls start on the next member too, unless a concurrent call moved them on already.
                _ = preferred.compareExchange(expected: member, desired: next, ordering: .relaxed)
                member = next
            }
        }
        throw lastError
    }

    /// Begins a call on the open connection to `member`, or on a new one if there is none or the open one is
    /// retired (it failed a call, or made its ``EtcdConnection/maxCalls``). End it with `endCall()` and
    /// `calls.leave()`.
    private func beginCall(on member: Int) throws -> EtcdConnection {
        try state.withLock { state in
            guard !state.closed else {
                throw EtcdError.unreachable(endpoints[member].description, "the client is shut down")
            }
            calls.enter()
            if let open = state.connections[member], open.beginCall() { return open }
            let connection: EtcdConnection
            do {
                connection = try EtcdConnection(to: endpoints[member], on: executor)
            } catch {
                calls.leave()
                throw EtcdError.unreachable(endpoints[member].description, "\(error)")
            }
            _ = connection.beginCall()
            state.connections[member] = connection
            state.opened.removeAll { $0.isClosed }
            state.opened.append(connection)
            return connection
        }
    }

    /// Retires `connection`, which failed a call (it closes once its other calls end), unless another call
    /// replaced it already.
    private func drop(_ connection: EtcdConnection, of member: Int) {
        state.withLock { state in
            if state.connections[member] === connection { state.connections[member] = nil }
        }
        connection.retire()
    }
}
