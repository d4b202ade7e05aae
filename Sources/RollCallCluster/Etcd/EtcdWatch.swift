import Foundation
import GRPCCore
import Synchronization

/// A watch of every key under a prefix, from a revision, on threads of its own: it delivers each change once and
/// in revision order, and survives the loss of its member by starting again, on the next member, just after the
/// last revision it delivered.
///
/// It is etcd's Watch stream over a gRPC connection of its own, asking for progress notifications (etcd sends one
/// when the watched keys have been quiet for a while: ``Update/progress(_:)``). The handler runs on the stream's
/// thread (an ``EtcdExecutor``), inside the stream's loop: while it is busy nothing more is read, and HTTP/2's flow
/// control holds etcd back, so a slow handler loses nothing. The watch's own thread starts each stream, gives it
/// the connection timeout to be set up, and moves to the next member when it ends; its waits are its own, not Swift's
/// timers (which wake up on the shared pool, which may be busy).
///
/// What it cannot do is deliver changes that etcd compacted away: it then reports ``Update/compacted(_:)`` and
/// stops, and its owner reads a new snapshot and starts a new watch. A member that stops answering without closing
/// the connection (a stopped process, a partition) leaves the watch silent: the owner, which knows etcd's latest
/// revision from its other calls, notices the lag and calls ``reconnect()``.
public final class EtcdWatch: Sendable {
    /// What the watch reports to its handler.
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
        /// The current stream, for ``reconnect()`` and ``cancel()`` to end.
        var attempt: Task<Void, Never>?
        /// Whether the current stream's watch is set up, and how it ended (`nil` while it runs).
        var created = false
        var ended: (any Error)??
        /// The next revision to ask for when the watch starts again.
        var next: Int64
    }

    private let state: Mutex<State>
    /// Signalled when the current stream is set up or ends, and by ``cancel()``: what the watch's thread waits for.
    private let wake = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private let executor = EtcdExecutor(name: "etcd-stream")
    private let prefix: String
    private let connectTimeout: Duration

    init(
        endpoints: [EtcdEndpoint], first: Int, prefix: String, from revision: Int64, connectTimeout: Duration,
        handler: @escaping @Sendable (Update) -> Void
    ) {
        state = Mutex(State(next: revision))
        self.prefix = prefix
        self.connectTimeout = connectTimeout
        let thread = Thread { [self] in
            nameThisThread("etcd-watch")
            let connections = run(endpoints: endpoints, first: first, handler: handler)
            // The stream's thread ends once the last connection has closed (one still connecting closes when its
            // attempt ends); nothing of the watch runs on it any more.
            let executor = executor
            Task(executorPreference: executor) {
                for connection in connections { await connection.closed() }
                executor.stop()
            }
            done.signal()
        }
        thread.start()
    }

    /// The revision the watch would start from if it started again: one past the last it delivered.
    public var nextRevision: Int64 { state.withLock { $0.next } }

    /// Drops the current connection; the watch starts again on the next member from ``nextRevision``. For a watch
    /// whose member fell silent.
    public func reconnect() {
        state.withLock { $0.attempt }?.cancel()
    }

    /// Stops the watch and waits for its thread to end; the handler is not called after this returns. (A watch
    /// that stopped at a compaction has ended already.)
    public func cancel() {
        let (first, attempt) = state.withLock { state in
            defer { state.cancelled = true }
            return (!state.cancelled, state.attempt)
        }
        attempt?.cancel()
        wake.signal()
        if first { done.wait() }
    }

    private var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// The watch's thread: one stream after another until cancelled or compacted; returns the connections it
    /// opened.
    private func run(
        endpoints: [EtcdEndpoint], first: Int, handler: @escaping @Sendable (Update) -> Void
    ) -> [EtcdConnection] {
        var connections: [EtcdConnection] = []
        var member = first
        var failures = 0
        while !isCancelled {
            let endpoint = endpoints[member]
            let (reason, created) = stream(on: endpoint, handler: handler, opened: &connections)
            guard let reason, !isCancelled else { break }
            if case .compacted(let revision) = reason {
                handler(.compacted(revision))
                state.withLock { $0.cancelled = true }
                break
            }
            handler(.disconnected(reason))
            member = (member + 1) % endpoints.count
            failures = created ? 1 : failures + 1
            // A short pause once every member failed in a row, so a dead cluster is not spun on.
            if failures >= endpoints.count { _ = wake.wait(timeout: .now() + .milliseconds(100)) }
        }
        return connections
    }

    /// Runs one stream on `endpoint` and waits for its end; returns why it ended (`nil`: cancelled) and whether
    /// its watch was set up. A watch not set up within the connection timeout is ended as timed out.
    private func stream(
        on endpoint: EtcdEndpoint, handler: @escaping @Sendable (Update) -> Void, opened: inout [EtcdConnection]
    ) -> (EtcdError?, created: Bool) {
        let connection: EtcdConnection
        do {
            connection = try EtcdConnection(to: endpoint, on: executor)
        } catch {
            return (.unreachable(endpoint.description, "\(error)"), false)
        }
        opened.removeAll { $0.isClosed }
        opened.append(connection)
        defer { connection.retire() }
        // Reset before the stream starts: it may end at once, on the stream's thread, before the lines below run.
        guard
            state.withLock({ state in
                state.created = false
                state.ended = nil
                return !state.cancelled
            })
        else { return (nil, false) }
        let attempt = Task(executorPreference: executor) { [self] in
            var failure: (any Error)?
            do {
                try await watch(on: connection, handler: handler)
            } catch {
                failure = error
            }
            state.withLock { [failure] in $0.ended = .some(failure) }
            wake.signal()
        }
        let registered = state.withLock { state in
            if !state.cancelled { state.attempt = attempt }
            return !state.cancelled
        }
        if !registered { attempt.cancel() }
        let setUpBy = ContinuousClock.now + connectTimeout
        var timedOut = false
        while true {
            let (created, ended, cancelled) = state.withLock { ($0.created, $0.ended != nil, $0.cancelled) }
            if ended || cancelled { break }
            if !created {
                let left = ContinuousClock.now.duration(to: setUpBy)
                if left <= .zero {
                    timedOut = true
                    attempt.cancel()
                    break
                }
                _ = wake.wait(timeout: .now() + .milliseconds(Int(left / .milliseconds(1)) + 1))
            } else {
                wake.wait()
            }
        }
        while state.withLock({ $0.ended == nil }) { wake.wait() }
        let (ended, created) = state.withLock { state in
            defer { state.attempt = nil }
            return (state.ended ?? nil, state.created)
        }
        // A compaction is reported whatever else happened; then a timeout or a reconnection, which cancelled it.
        if let error = ended as? EtcdError, case .compacted = error { return (error, created) }
        if timedOut { return (.timedOut(endpoint.description), created) }
        if attempt.isCancelled { return (.unreachable(endpoint.description, "watch reconnecting"), created) }
        guard let ended else { return (nil, created) }
        return (EtcdError(ended, member: endpoint), created)
    }

    /// One watch stream on `connection`, from ``nextRevision``, until it fails or is cancelled.
    private func watch(on connection: EtcdConnection, handler: @escaping @Sendable (Update) -> Void) async throws {
        let request = Etcdserverpb_WatchRequest.with {
            $0.createRequest = .with { create in
                create.key = Data(prefix.utf8)
                create.rangeEnd = EtcdProtobuf.prefixEnd(prefix)
                create.startRevision = nextRevision
                create.progressNotify = true
            }
        }
        let endpoint = connection.endpoint
        try await Etcdserverpb_Watch.Client(wrapping: connection.client).watch(
            options: EtcdConnection.options(timeout: nil),
            requestProducer: { writer in
                try await writer.write(request)
                // The request stream stays open: etcd ends the watches of a stream that closes it.
                while true { try await Task.sleep(for: .seconds(3_600)) }
            },
            onResponse: { [self] response in
                for try await reply in response.messages {
                    try deliver(reply, from: endpoint, handler: handler)
                }
                throw EtcdError.unreachable(endpoint.description, "watch stream ended")
            })
    }

    /// Hands one watch response to the handler.
    private func deliver(
        _ reply: Etcdserverpb_WatchResponse, from endpoint: EtcdEndpoint, handler: @Sendable (Update) -> Void
    ) throws {
        if reply.compactRevision > 0 { throw EtcdError.compacted(compactRevision: reply.compactRevision) }
        if reply.canceled {
            throw EtcdError.unreachable(endpoint.description, "watch canceled: \(reply.cancelReason)")
        }
        if Task.isCancelled || isCancelled { throw CancellationError() }
        if reply.created {
            state.withLock { $0.created = true }
            wake.signal()
            handler(.connected(endpoint))
            return
        }
        let events = reply.events.map(EtcdProtobuf.event)
        if let last = events.last {
            state.withLock { $0.next = max($0.next, last.kv.modRevision + 1) }
            handler(.events(events))
        } else {
            // A progress notification: everything up to the header's revision has been sent.
            let revision = reply.header.revision
            state.withLock { $0.next = max($0.next, revision + 1) }
            handler(.progress(revision))
        }
    }
}
