import RollCallCore

/// How batches are cut and how long a batch is retried.
public struct DeliveryPolicy: Equatable, Sendable {
    /// The most entries in one batch.
    public var batchMax: Int
    /// A batch is cut this long after its first entry arrived, if it has not filled before.
    public var batchWindow: Duration
    /// A batch that still fails this long after its first attempt is skipped (at the next failure).
    public var retryWindow: Duration
    /// The first retry's delay before jitter; each further retry doubles it, up to ``maxBackoff``.
    public var firstBackoff: Duration = .seconds(1)
    public var maxBackoff: Duration = .seconds(300)
    /// The start of every `webhook-id`: `msg` for transitions, `msg_offline` for `presence.offline_for`.
    public var idPrefix = "msg"

    public init(batchMax: Int, batchWindow: Duration, retryWindow: Duration) {
        self.batchMax = batchMax
        self.batchWindow = batchWindow
        self.retryWindow = retryWindow
    }
}

/// One URL's delivery as a value (docs/webhooks.md): which entries form the next batch and when, at most one batch
/// in flight, retries of the same batch with capped, jittered exponential backoff, the skip after the retry window,
/// and the cursor to save. No thread, clock, socket or randomness of its own: the time is a parameter of every
/// input and the jitter is handed in, so that tests drive it on a clock they move.
///
/// Its shell (``WebhookDelivery``) reads the log into it (``room`` entries after ``readThrough``), asks ``next(now:)``
/// what to do, carries out the POST, and reports ``acknowledged(now:)`` or ``failed(now:jitter:)``.
public struct DeliveryMachine<Instant: InstantProtocol>: Sendable where Instant.Duration == Duration {
    /// Entries sent together, under one `webhook-id`, until the URL acknowledges them.
    public struct Batch: Equatable, Sendable {
        public var entries: [LogEntry]
        /// How many times it was sent, this one included.
        public var attempts: Int
        /// When it was first sent: the retry window counts from here.
        public var firstAttempt: Instant
        /// ``DeliveryPolicy/idPrefix``.
        public var idPrefix = "msg"

        /// `msg_<first offset>_<last offset>` (with the policy's prefix): the same for every retry, and after a restart (the cursor keeps the
        /// bounds of the batch in flight), so that a receiver can tell a retry from a new batch.
        public var id: String { "\(idPrefix)_\(first)_\(last)" }
        public var first: UInt64 { entries.first?.offset ?? 0 }
        public var last: UInt64 { entries.last?.offset ?? 0 }
    }

    /// What the shell does next.
    public enum Action: Equatable, Sendable {
        /// POST the batch; first save `cursor` if there is one (the bounds of a batch sent for the first time).
        case send(Batch, save: WebhookCursor?)
        /// Nothing to send before `until` (`nil`: before new entries are read); read again on a notification.
        case wait(until: Instant?)
    }

    /// What a failed attempt leads to.
    public enum Failure: Equatable, Sendable {
        /// The same batch again after `delay`; `attempt` is the number of the next attempt.
        case retry(after: Duration, attempt: Int)
        /// The retry window is over: the batch is given up and the cursor moves past it (save `save`).
        case skipped(Batch, save: WebhookCursor)
    }

    private enum State: Equatable, Sendable {
        case idle
        case inFlight(Batch)
        case backingOff(Batch, until: Instant)
    }

    private struct Pending: Equatable, Sendable {
        var entry: LogEntry
        var arrived: Instant
    }

    public let policy: DeliveryPolicy
    /// The offset of the last entry acknowledged or skipped.
    public private(set) var acknowledged: UInt64
    /// The offset of the last entry read from the log: the next read starts after it.
    public private(set) var readThrough: UInt64
    /// Batches skipped after their retry window, since the start.
    public private(set) var skippedBatches = 0
    private var state = State.idle
    /// Entries read and not yet in a batch, in offset order, at most ``DeliveryPolicy/batchMax``.
    private var buffer: [Pending] = []
    /// The batch that was in flight when the broker stopped: the first batch ends at `through`; it was first sent
    /// at `since` (Unix seconds), `retried` ago.
    private var resume: (through: UInt64, since: Int64?, retried: Duration)?

    /// A machine that starts after `cursor`. A batch in flight at the last stop is cut again with the same bounds,
    /// and its retry window goes on: `retriedFor` is how long ago it was first sent (from the cursor's
    /// ``WebhookCursor/unacknowledgedSince``, on the wall clock).
    public init(policy: DeliveryPolicy, cursor: WebhookCursor, retriedFor: Duration = .zero) {
        self.policy = policy
        acknowledged = cursor.acknowledged
        readThrough = cursor.acknowledged
        if let through = cursor.unacknowledgedThrough, through > cursor.acknowledged {
            resume = (through, cursor.unacknowledgedSince, max(retriedFor, .zero))
        }
    }

    /// How many entries the next read may take: the buffer holds one batch at most beside the one in flight.
    public var room: Int { policy.batchMax - buffer.count }

    /// Whether a batch is in flight or waits for its retry.
    public var isDelivering: Bool { state != .idle }

    /// The batch in flight or waiting for its retry, if any.
    public var currentBatch: Batch? {
        switch state {
        case .idle: nil
        case .inFlight(let batch), .backingOff(let batch, _): batch
        }
    }

    /// Entries read from the log at `now`, in offset order; those not after ``readThrough`` are ignored.
    public mutating func received(_ entries: some Sequence<LogEntry>, now: Instant) {
        for entry in entries where entry.offset > readThrough && buffer.count < policy.batchMax {
            buffer.append(Pending(entry: entry, arrived: now))
            readThrough = entry.offset
        }
    }

    /// What to do at `now`.
    public mutating func next(now: Instant) -> Action {
        switch state {
        case .inFlight:
            return .wait(until: nil)
        case .backingOff(var batch, let until):
            guard now >= until else { return .wait(until: until) }
            batch.attempts += 1
            state = .inFlight(batch)
            return .send(batch, save: nil)
        case .idle:
            guard let first = buffer.first else { return .wait(until: nil) }
            if let resume {
                self.resume = nil
                let count = buffer.prefix { $0.entry.offset <= resume.through }.count
                if count > 0 { return cut(count, now: now, resuming: resume) }
            }
            let due = first.arrived.advanced(by: policy.batchWindow)
            guard buffer.count >= policy.batchMax || now >= due else { return .wait(until: due) }
            return cut(min(buffer.count, policy.batchMax), now: now)
        }
    }

    /// The batch in flight was acknowledged (a 2xx): the cursor to save; the next batch may go.
    public mutating func acknowledged(now: Instant) -> WebhookCursor {
        guard case .inFlight(let batch) = state else {
            preconditionFailure("acknowledged with no batch in flight")
        }
        acknowledged = batch.last
        state = .idle
        return WebhookCursor(acknowledged: acknowledged)
    }

    /// The batch in flight failed (not a 2xx, a timeout, a refused connection). `jitter`, in 0...1, picks the
    /// delay in the upper half of the backoff: delay = backoff × (1 + jitter) / 2.
    public mutating func failed(now: Instant, jitter: Double) -> Failure {
        guard case .inFlight(let batch) = state else {
            preconditionFailure("failed with no batch in flight")
        }
        if batch.firstAttempt.duration(to: now) >= policy.retryWindow {
            acknowledged = batch.last
            skippedBatches += 1
            state = .idle
            return .skipped(batch, save: WebhookCursor(acknowledged: acknowledged))
        }
        let delay = Self.backoff(attempt: batch.attempts, policy: policy, jitter: jitter)
        state = .backingOff(batch, until: now.advanced(by: delay))
        return .retry(after: delay, attempt: batch.attempts + 1)
    }

    /// The delay after failed attempt `attempt` (1 for the first): `firstBackoff` doubled `attempt - 1` times, at
    /// most `maxBackoff`, then scaled by (1 + jitter) / 2 so that retries of many URLs spread out.
    public static func backoff(attempt: Int, policy: DeliveryPolicy, jitter: Double) -> Duration {
        var base = policy.firstBackoff
        for _ in 1..<max(attempt, 1) where base < policy.maxBackoff { base *= 2 }
        base = min(base, policy.maxBackoff)
        let fraction = (1 + min(max(jitter, 0), 1)) / 2
        return base * fraction
    }

    /// Makes the first `count` entries of the buffer the batch in flight. `resuming`: the batch in flight at the
    /// last stop, whose retry window counts from its first attempt then (the saved cursor keeps that time).
    private mutating func cut(
        _ count: Int, now: Instant, resuming: (through: UInt64, since: Int64?, retried: Duration)? = nil
    ) -> Action {
        let batch = Batch(
            entries: buffer.prefix(count).map(\.entry), attempts: 1,
            firstAttempt: now.advanced(by: .zero - (resuming?.retried ?? .zero)), idPrefix: policy.idPrefix)
        buffer.removeFirst(count)
        state = .inFlight(batch)
        return .send(
            batch,
            save: WebhookCursor(
                acknowledged: acknowledged, unacknowledgedThrough: batch.last, unacknowledgedSince: resuming?.since))
    }
}
