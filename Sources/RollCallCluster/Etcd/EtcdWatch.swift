import Foundation
import Synchronization

/// A watch of every key under a prefix, from a revision, on a thread of its own: it delivers each change once and
/// in revision order, and survives the loss of its member by starting again, on the next member, just after the
/// last revision it delivered.
///
/// What it cannot do is deliver changes that etcd compacted away: it then reports ``Update/compacted(_:)`` and
/// stops, and its owner reads a new snapshot and starts a new watch. A member that stops answering without closing
/// the connection (a stopped process, a partition) leaves the watch silent: the owner, which knows etcd's latest
/// revision from its other calls, notices the lag and calls ``reconnect()``.
public final class EtcdWatch: Sendable {
    /// What the watch reports to its handler, on its own thread.
    public enum Update: Sendable, Equatable {
        /// The watch is set up on a member (again, after ``disconnected(_:)``).
        case connected(EtcdEndpoint)
        /// Changes of one or more revisions, in order.
        case events([EtcdEvent])
        /// etcd says every change up to this revision has been delivered.
        case progress(Int64)
        /// The connection was lost; the watch tries the next member in a moment.
        case disconnected(EtcdError)
        /// The start revision is older than etcd's compaction; the watch has stopped.
        case compacted(Int64)
    }

    private struct State {
        var cancelled = false
        /// The reply being read, for ``reconnect()`` and ``cancel()`` to close.
        var stream: ResponseStream?
        /// The next revision to ask for when the watch starts again.
        var next: Int64
    }

    /// The longest a watch response may grow without its newline before the watch gives up on it.
    static let maxResponseBytes = 64 << 20

    private let state: Mutex<State>
    private let done = DispatchSemaphore(value: 0)

    init(
        gateway: EtcdGateway, endpoints: [EtcdEndpoint], first: Int, prefix: String, from revision: Int64,
        connectTimeout: Duration, handler: @escaping @Sendable (Update) -> Void
    ) {
        state = Mutex(State(next: revision))
        let thread = Thread { [self] in
            run(
                gateway: gateway, endpoints: endpoints, first: first, prefix: prefix, connectTimeout: connectTimeout,
                handler: handler)
        }
        thread.name = "rollcall-etcd-watch"
        thread.start()
    }

    /// The revision the watch would start from if it started again: one past the last it delivered.
    public var nextRevision: Int64 { state.withLock { $0.next } }

    /// Drops the current connection; the watch starts again on the next member from ``nextRevision``. For a watch
    /// whose member fell silent.
    public func reconnect() {
        guard let stream = state.withLock({ $0.stream }) else { return }
        stream.close(.unreachable(stream.member.description, "watch reconnecting"))
    }

    /// Stops the watch and waits for its thread to end; the handler is not called after this returns.
    public func cancel() {
        let (first, stream) = state.withLock { state in
            defer { state.cancelled = true }
            return (!state.cancelled, state.stream)
        }
        stream?.close(.cancelled)
        if first { done.wait() }
    }

    private var isCancelled: Bool { state.withLock { $0.cancelled } }

    private func run(
        gateway: EtcdGateway, endpoints: [EtcdEndpoint], first: Int, prefix: String, connectTimeout: Duration,
        handler: @escaping @Sendable (Update) -> Void
    ) {
        defer { done.signal() }
        var member = first
        var failures = 0
        while !isCancelled {
            let endpoint = endpoints[member]
            do {
                let request: [String: Any] = [
                    "create_request": [
                        "key": EtcdJSON.base64(prefix), "range_end": EtcdJSON.prefixEnd(prefix),
                        "start_revision": String(nextRevision), "progress_notify": true,
                    ] as [String: Any]
                ]
                let stream = gateway.openStream("/v3/watch", body: EtcdJSON.encode(request), to: endpoint)
                let registered = state.withLock { state in
                    if !state.cancelled { state.stream = stream }
                    return !state.cancelled
                }
                defer {
                    state.withLock { $0.stream = nil }
                    stream.close(.cancelled)
                }
                guard registered else { return }
                let status = try stream.waitForStatus(until: .now + connectTimeout)
                guard status == 200 else {
                    // An error answered in one piece: read it so the handler can report it.
                    let text = try stream.readToEnd(until: .now + connectTimeout)
                    throw EtcdError.http(status: status, String(decoding: text, as: UTF8.self))
                }
                var lines = JSONLines()
                while let bytes = try stream.next() {
                    lines.append(bytes)
                    while let response = lines.next() {
                        if isCancelled { return }
                        if try deliver(response, from: endpoint, handler: handler) { return }
                        failures = 0
                    }
                    guard lines.pendingCount <= Self.maxResponseBytes else {
                        throw EtcdError.protocolError("a watch response of more than \(Self.maxResponseBytes) bytes")
                    }
                }
                throw EtcdError.unreachable(endpoint.description, "watch stream ended")
            } catch {
                if isCancelled { return }
                let reason = error as? EtcdError ?? .protocolError("\(error)")
                if case .compacted(let revision) = reason {
                    handler(.compacted(revision))
                    state.withLock { $0.cancelled = true }
                    return
                }
                handler(.disconnected(reason))
                member = (member + 1) % endpoints.count
                failures += 1
                // A short pause once every member failed in a row, so a dead cluster is not spun on.
                if failures >= endpoints.count { Thread.sleep(forTimeInterval: 0.1) }
            }
        }
    }

    /// Hands one watch response to the handler; returns whether the watch is over.
    private func deliver(
        _ chunk: Data, from endpoint: EtcdEndpoint, handler: @Sendable (Update) -> Void
    ) throws -> Bool {
        let reply = try EtcdJSON.decode(chunk)
        if let error = reply["error"] as? [String: Any] {
            throw EtcdError.http(status: Int(EtcdJSON.int64(error["http_code"])), "\(error)")
        }
        guard let result = reply["result"] as? [String: Any] else { throw EtcdError.protocolError("no result") }
        let compactRevision = EtcdJSON.int64(result["compact_revision"])
        if compactRevision > 0 { throw EtcdError.compacted(compactRevision: compactRevision) }
        if result["canceled"] as? Bool == true {
            throw EtcdError.unreachable(endpoint.description, "watch canceled: \(result["cancel_reason"] ?? "")")
        }
        if result["created"] as? Bool == true {
            handler(.connected(endpoint))
            return false
        }
        let events = (result["events"] as? [Any] ?? []).map { value -> EtcdEvent in
            let event = value as? [String: Any] ?? [:]
            return EtcdEvent(
                kind: event["type"] as? String == "DELETE" ? .delete : .put, kv: EtcdJSON.keyValue(event["kv"]))
        }
        if let last = events.last {
            state.withLock { $0.next = max($0.next, last.kv.modRevision + 1) }
            handler(.events(events))
        } else {
            // A progress notification: everything up to the header's revision has been sent.
            let revision = EtcdJSON.revision(result)
            state.withLock { $0.next = max($0.next, revision + 1) }
            handler(.progress(revision))
        }
        return false
    }
}
