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
/// A node serves requests only when ``State/live(lease:)`` and inside its ``Window``: it declares itself cut off
/// before etcd can have expired its lease (``Configuration/cutOffAfterMs``, the lease less
/// ``Configuration/safetyMarginMs``, after the last renewal etcd answered was sent), so that it never claims sessions
/// that the rest of the cluster may already have ended (docs/cluster.md, "Honest under partition").
public struct NodeMembership: Sendable {
    public struct Configuration: Sendable, Equatable {
        /// The lease's time to live, in milliseconds. Range: 2_000...3_600_000.
        public var leaseMs: Int64
        /// How often the lease is renewed: a third of the lease.
        public var keepAliveIntervalMs: Int64 { leaseMs / 3 }
        /// How much of the lease the node gives up to stay on the safe side of etcd's clock: a third of the lease
        /// (at least 667 ms). It must cover an acknowledged write's way to etcd (one request timeout, which
        /// ``ClusterNode/Configuration`` keeps under a third of the lease), the event loop's round, clock-rate
        /// differences between the node and etcd's leader, and a keep-alive answered by a leader that was already
        /// deposed (etcd extends every lease by an election timeout on a new leader for that; docs/cluster.md).
        public var safetyMarginMs: Int64 { leaseMs / 3 }
        /// How long after sending the last renewal that etcd answered the node serves: the lease less
        /// ``safetyMarginMs``, so it stops before the lease can expire (etcd counts the lease from when it
        /// received that renewal, which is after it was sent).
        public var cutOffAfterMs: Int64 { leaseMs - safetyMarginMs }
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
    /// When the last renewal of the lease that etcd answered (the grant, or a keep-alive that found the lease) was
    /// sent: the worker passes the time it sent the call as `nowMs`. Other answers (writes, snapshots) renew
    /// nothing and do not move it.
    private var lastRenewalSentMs: Int64 = 0
    /// The node's own writes not yet seen through the watch: (revision, written at).
    private var unconfirmed: (revision: Int64, atMs: Int64)?
    private var watchedRevision: Int64 = 0
    private var lastWriteMs: Int64 = 0
    /// Whether a call is under way (the worker answers one at a time).
    private var busy = false
    /// The lease being registered while joining.
    private var pendingLease: Int64 = 0

    public init(configuration: Configuration) { self.configuration = configuration }

    /// Until when (on the caller's clock) the node may serve requests: while live, the sending of the last renewal
    /// etcd answered plus ``Configuration/cutOffAfterMs``; `nil` otherwise.
    public var servingUntilMs: Int64? {
        guard case .live = state else { return nil }
        return lastRenewalSentMs + configuration.cutOffAfterMs
    }

    /// The window in which the node may serve requests, as it stands now: a value that other threads can keep and
    /// ask at any time, so that the window closes on time even while the worker waits for etcd.
    public var window: Window { Window(servingUntilMs: servingUntilMs) }

    /// Whether the node may serve requests (take sessions, acknowledge changes on them, answer reads) at `nowMs`.
    public struct Window: Sendable, Equatable {
        /// The first moment, on the node's clock, at which it serves nothing; `nil`: not live, serves nothing.
        public var servingUntilMs: Int64?

        public init(servingUntilMs: Int64?) { self.servingUntilMs = servingUntilMs }

        /// Whether the node serves at `nowMs`: strictly before ``servingUntilMs``.
        public func accepts(nowMs: Int64) -> Bool {
            guard let until = servingUntilMs else { return false }
            return nowMs < until
        }
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
            // etcd counts a new lease from when it granted it, after the grant was sent.
            lastRenewalSentMs = now
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
            lastRenewalSentMs = max(lastRenewalSentMs, now)
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
            // Try again soon rather than a third of the lease later: a renewal that gets through before the window
            // closes keeps the node serving without a gap.
            nextDeadlineMs = min(nextDeadlineMs ?? now, now + configuration.retryMs)
            if now - lastRenewalSentMs >= configuration.cutOffAfterMs {
                return enter(.cutOff(lease: lease, sinceMs: now))
            }
            return []
        case (.callFailed(let now), .cutOff):
            busy = false
            nextDeadlineMs = min(nextDeadlineMs ?? now, now + configuration.retryMs)
            return []

        case (.wrote(let revision, let now), .live), (.wrote(let revision, let now), .cutOff):
            // A write under the lease shows that etcd had it, not that it will keep it: the window does not move.
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
        // The window runs from the grant's sending (leaseGranted), not from now: registering and reading the
        // snapshot took some of the lease. The first renewal is due a third of the lease after the grant.
        lastWriteMs = now
        watchedRevision = revision
        unconfirmed = nil
        nextDeadlineMs = lastRenewalSentMs + configuration.keepAliveIntervalMs
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
            if case .live = state, now - lastRenewalSentMs >= configuration.cutOffAfterMs {
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
