/// A node's life in the cluster, as a pure state machine: events in (what etcd answered, what the watch delivered,
/// the time), actions out (what the node's etcd worker must do next). No etcd, no threads, no clock of its own:
/// time is milliseconds on any monotonic clock, passed in.
///
/// ```
/// joining ──lease granted, registered, snapshot loaded──▶ live ──no keep-alive answer for cutOffAfter──▶ cutOff
///    ▲                                                     ▲                                               │
///    │                                                     └──────keep-alive answered, lease still there───┤
///    └──────────────────────────────── lease gone (expired while cut off) ◀────────────────────────────────┘
/// ```
///
/// A node serves new sessions only when ``State/live(lease:)``. It declares itself cut off before etcd can have
/// expired its lease (``Configuration/cutOffAfter`` is two thirds of the lease), so that it never claims sessions that
/// the rest of the cluster may already have ended.
public struct NodeMembership: Sendable {
    public struct Configuration: Sendable, Equatable {
        /// The lease's time to live, in milliseconds. Range: 2_000...3_600_000.
        public var leaseMs: Int64
        /// How often the lease is renewed: a third of the lease.
        public var keepAliveIntervalMs: Int64 { leaseMs / 3 }
        /// How long without an answer from etcd before the node says it is cut off: two thirds of the lease, so
        /// before the lease can expire (it runs from when etcd received the last renewal, after it was sent).
        public var cutOffAfterMs: Int64 { leaseMs * 2 / 3 }
        /// How long the node's own write may take to come back through its watch before the watch is started
        /// again (its member may have gone silent without closing the connection).
        public var watchLagLimitMs: Int64 { max(1_000, leaseMs / 3) }
        /// Pause between attempts to join when etcd cannot be reached.
        public var retryMs: Int64 { min(1_000, leaseMs / 4) }

        public init(leaseMs: Int64 = 5_000) { self.leaseMs = leaseMs }

        /// The lease in whole seconds, as etcd grants them (rounded up).
        public var leaseSeconds: Int64 { (leaseMs + 999) / 1_000 }
    }

    public enum State: Sendable, Equatable {
        /// Getting a lease, registering, loading a snapshot. `attempt` counts failed tries.
        case joining(attempt: Int)
        /// Serving, with this lease.
        case live(lease: Int64)
        /// etcd has not answered for too long: no new sessions, nothing claimed. The lease may still exist.
        case cutOff(lease: Int64, sinceMs: Int64)
        /// Stopped for good.
        case stopped

        public var isLive: Bool { if case .live = self { true } else { false } }
    }

    /// What the node's etcd worker must do.
    public enum Action: Sendable, Equatable {
        /// Grant a lease of ``Configuration/leaseSeconds``, then report ``Event/leaseGranted(_:nowMs:)``.
        case grantLease
        /// Write the incarnation's key (and the node's local sessions) under `lease`, then read a snapshot and
        /// report ``Event/snapshotLoaded(revision:nowMs:)``; start the watch after it.
        case register(lease: Int64)
        /// Renew `lease`, then report ``Event/keepAliveAnswered(leaseAlive:nowMs:)`` or
        /// ``Event/callFailed(nowMs:)``.
        case keepAlive(lease: Int64)
        /// Write something small (the incarnation's key again) so that the watch has something of the node's own
        /// to bring back; report its revision with ``Event/wrote(revision:nowMs:)``.
        case probe(lease: Int64)
        /// Drop the watch's connection; it starts again from where it was, on the next member.
        case restartWatch
        /// Read a fresh snapshot and start a new watch after it (the watch fell behind compaction).
        case resync
        /// Tell the event loop the state changed.
        case report(State)
        /// Revoke `lease` (stopping): every session of this incarnation ends everywhere at once.
        case revoke(lease: Int64)
    }

    public enum Event: Sendable, Equatable {
        case start(nowMs: Int64)
        case leaseGranted(Int64, nowMs: Int64)
        case snapshotLoaded(revision: Int64, nowMs: Int64)
        /// A keep-alive was answered: the lease is still there, or is gone.
        case keepAliveAnswered(leaseAlive: Bool, nowMs: Int64)
        /// A call failed: etcd unreachable, no answer in time, no leader.
        case callFailed(nowMs: Int64)
        /// The node wrote to etcd at `revision`.
        case wrote(revision: Int64, nowMs: Int64)
        /// The watch delivered everything up to `revision`.
        case watched(revision: Int64)
        /// The watch fell behind compaction.
        case watchCompacted
        case tick(nowMs: Int64)
        case stop
    }

    public let configuration: Configuration
    public private(set) var state: State = .joining(attempt: 0)
    /// When the worker should next be asked something (a keep-alive, a retry), on the caller's clock.
    public private(set) var nextDeadlineMs: Int64?
    /// When etcd last answered a call of this node (the time the call was sent is what counts; the worker passes
    /// it as `nowMs`).
    private var lastAnswerMs: Int64 = 0
    /// The node's own writes not yet seen through the watch: (revision, written at).
    private var unconfirmed: (revision: Int64, atMs: Int64)?
    private var watchedRevision: Int64 = 0
    private var lastWriteMs: Int64 = 0
    /// Whether a call is under way (the worker answers one at a time).
    private var busy = false
    /// The lease being registered while joining.
    private var pendingLease: Int64 = 0

    public init(configuration: Configuration) { self.configuration = configuration }

    /// Until when (on the caller's clock) the node may take new sessions: while live, the last answer from etcd plus
    /// ``Configuration/cutOffAfterMs``; `nil` otherwise.
    public var servingUntilMs: Int64? {
        guard case .live = state else { return nil }
        return lastAnswerMs + configuration.cutOffAfterMs
    }

    /// Handles one event; returns what to do, in order.
    public mutating func handle(_ event: Event) -> [Action] {
        switch (event, state) {
        case (_, .stopped):
            return []
        case (.stop, .live(let lease)), (.stop, .cutOff(let lease, _)):
            return enter(.stopped) + [.revoke(lease: lease)]
        case (.stop, _):
            return enter(.stopped)

        case (.start(let now), .joining):
            busy = true
            nextDeadlineMs = now + configuration.retryMs
            return [.grantLease]
        case (.leaseGranted(let lease, let now), .joining):
            lastAnswerMs = now
            pendingLease = lease
            return [.register(lease: lease)]
        case (.snapshotLoaded(let revision, let now), .joining):
            return join(revision: revision, now: now)
        case (.callFailed(let now), .joining(let attempt)):
            busy = false
            state = .joining(attempt: attempt + 1)
            nextDeadlineMs = now + configuration.retryMs
            return []

        case (.keepAliveAnswered(true, let now), .live), (.keepAliveAnswered(true, let now), .cutOff):
            busy = false
            lastAnswerMs = now
            guard case .cutOff(let lease, _) = state else { return [] }
            // Back in time: the lease never expired, and the watch goes on from where it was.
            return enter(.live(lease: lease))
        case (.keepAliveAnswered(false, let now), .live), (.keepAliveAnswered(false, let now), .cutOff):
            // The lease is gone: every session of this incarnation has ended everywhere. Join again.
            busy = true
            nextDeadlineMs = now + configuration.retryMs
            return enter(.joining(attempt: 0)) + [.grantLease]
        case (.callFailed(let now), .live(let lease)):
            busy = false
            if now - lastAnswerMs >= configuration.cutOffAfterMs { return enter(.cutOff(lease: lease, sinceMs: now)) }
            return []
        case (.callFailed(let now), .cutOff):
            busy = false
            nextDeadlineMs = min(nextDeadlineMs ?? now, now + configuration.retryMs)
            return []

        case (.wrote(let revision, let now), .live), (.wrote(let revision, let now), .cutOff):
            lastAnswerMs = max(lastAnswerMs, now)
            lastWriteMs = now
            if revision > watchedRevision, unconfirmed == nil { unconfirmed = (revision, now) }
            return []
        case (.watched(let revision), _):
            watchedRevision = max(watchedRevision, revision)
            if let pending = unconfirmed, pending.revision <= revision { unconfirmed = nil }
            return []
        case (.watchCompacted, .live), (.watchCompacted, .cutOff):
            unconfirmed = nil
            return [.resync]

        case (.tick(let now), _):
            return tick(now: now)

        // Answers that belong to another state: late answers to a call made before the node joined again or was cut
        // off, or a repeated start. Named one by one rather than by `default`, so that a new event or state must be
        // decided here.
        case (.start, .live), (.start, .cutOff),
            (.leaseGranted, .live), (.leaseGranted, .cutOff),
            (.snapshotLoaded, .live), (.snapshotLoaded, .cutOff),
            (.keepAliveAnswered, .joining), (.wrote, .joining), (.watchCompacted, .joining):
            return []
        }
    }

    private mutating func join(revision: Int64, now: Int64) -> [Action] {
        busy = false
        lastAnswerMs = now
        lastWriteMs = now
        watchedRevision = revision
        unconfirmed = nil
        nextDeadlineMs = now + configuration.keepAliveIntervalMs
        return enter(.live(lease: pendingLease))
    }

    private mutating func tick(now: Int64) -> [Action] {
        var actions: [Action] = []
        switch state {
        case .joining:
            if !busy, let deadline = nextDeadlineMs, now >= deadline {
                busy = true
                nextDeadlineMs = now + configuration.retryMs
                actions.append(.grantLease)
            }
        case .live(let lease), .cutOff(let lease, _):
            if case .live = state, now - lastAnswerMs >= configuration.cutOffAfterMs {
                actions += enter(.cutOff(lease: lease, sinceMs: now))
            }
            if let pending = unconfirmed, now - pending.atMs >= configuration.watchLagLimitMs {
                unconfirmed = nil
                actions.append(.restartWatch)
            }
            if !busy, now >= (nextDeadlineMs ?? 0) {
                busy = true
                nextDeadlineMs = now + configuration.keepAliveIntervalMs
                actions.append(.keepAlive(lease: lease))
                if case .live = state, unconfirmed == nil, now - lastWriteMs >= configuration.keepAliveIntervalMs {
                    actions.append(.probe(lease: lease))
                }
            }
        case .stopped:
            break
        }
        return actions
    }

    private mutating func enter(_ new: State) -> [Action] {
        guard new != state else { return [] }
        state = new
        return [.report(new)]
    }
}
