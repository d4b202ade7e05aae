import Foundation
import GRPCCore
import Synchronization

/// A watch of every key under a prefix, from a revision, on a thread of its own: it delivers each change once and
/// in revision order, and survives the loss of its member by starting again, on the next member, just after the
/// last revision it delivered.
///
/// It is etcd's Watch stream over a gRPC connection of its own, asking for progress notifications (etcd sends one
/// when the watched keys have been quiet for a while: ``Update/progress(_:)``). The handler runs on the watch's
/// thread, inside the stream's loop: while it is busy nothing more is read, and HTTP/2's flow control holds etcd
/// back, so a slow handler loses nothing.
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
        /// The stream being read, for ``reconnect()`` and ``cancel()`` to end.
        var attempt: Task<Void, any Error>?
        /// Whether the current attempt's watch is set up.
        var created = false
        /// The next revision to ask for when the watch starts again.
        var next: Int64
    }

    private let state: Mutex<State>
    private let executor = EtcdExecutor(name: "rollcall-etcd-watch")
    private let done = DispatchSemaphore(value: 0)
    private let prefix: String
    private let connectTimeout: Duration

    init(
        endpoints: [EtcdEndpoint], first: Int, prefix: String, from revision: Int64, connectTimeout: Duration,
        handler: @escaping @Sendable (Update) -> Void
    ) {
        state = Mutex(State(next: revision))
        self.prefix = prefix
        self.connectTimeout = connectTimeout
        Task(executorPreference: executor) { [self] in
            await run(endpoints: endpoints, first: first, handler: handler)
            done.signal()
        }
    }

    /// The revision the watch would start from if it started again: one past the last it delivered.
    public var nextRevision: Int64 { state.withLock { $0.next } }

    /// Drops the current connection; the watch starts again on the next member from ``nextRevision``. For a watch
    /// whose member fell silent.
    public func reconnect() {
        state.withLock { $0.attempt }?.cancel()
    }

    /// Stops the watch and waits for its thread to end; the handler is not called after this returns.
    public func cancel() {
        let (first, attempt) = state.withLock { state in
            defer { state.cancelled = true }
            return (!state.cancelled, state.attempt)
        }
        attempt?.cancel()
        if first {
            done.wait()
            executor.stop()
        }
    }

    private var isCancelled: Bool { state.withLock { $0.cancelled } }

    private func run(endpoints: [EtcdEndpoint], first: Int, handler: @escaping @Sendable (Update) -> Void) async {
        var member = first
        var failures = 0
        while !isCancelled {
            let endpoint = endpoints[member]
            let attempt = Task(executorPreference: executor) { try await self.watch(on: endpoint, handler: handler) }
            let registered = state.withLock { state in
                state.created = false
                if !state.cancelled { state.attempt = attempt }
                return !state.cancelled
            }
            if !registered { attempt.cancel() }
            let result = await attempt.result
            let created = state.withLock { state in
                state.attempt = nil
                return state.created
            }
            guard case .failure(let error) = result, !isCancelled else { return }
            let reason =
                attempt.isCancelled
                ? EtcdError.unreachable(endpoint.description, "watch reconnecting") : EtcdError(error, member: endpoint)
            if case .compacted(let revision) = reason {
                handler(.compacted(revision))
                state.withLock { $0.cancelled = true }
                return
            }
            handler(.disconnected(reason))
            member = (member + 1) % endpoints.count
            failures = created ? 1 : failures + 1
            // A short pause once every member failed in a row, so a dead cluster is not spun on.
            if failures >= endpoints.count { try? await Task.sleep(for: .milliseconds(100)) }
        }
    }

    /// One watch stream on `endpoint`, from ``nextRevision``, until it fails or is cancelled. It fails with
    /// ``EtcdError/timedOut(_:)`` if etcd has not set it up within the connection timeout.
    private func watch(on endpoint: EtcdEndpoint, handler: @escaping @Sendable (Update) -> Void) async throws {
        let connection = try EtcdConnection(to: endpoint, on: executor)
        let request = Etcdserverpb_WatchRequest.with {
            $0.createRequest = .with { create in
                create.key = Data(prefix.utf8)
                create.rangeEnd = EtcdProtobuf.prefixEnd(prefix)
                create.startRevision = nextRevision
                create.progressNotify = true
            }
        }
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
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
                group.addTask { [self] in
                    try await Task.sleep(for: connectTimeout)
                    if !state.withLock({ $0.created }) { throw EtcdError.timedOut(endpoint.description) }
                }
                // The stream never ends without an error; the timer ends quietly once the watch is set up.
                while try await group.next() != nil {}
            }
        } catch {
            connection.close()
            await connection.closed()
            throw error
        }
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
