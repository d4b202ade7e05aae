import RollCallCore

/// The loop's own timers on the broker's clock, decided without one: when the broker heartbeat goes out on
/// `broker/`, when noted changes go to the store, and when freed memory is given back after connections closed.
/// The loop asks what is due at the time it reads, and waits at most until ``nextDeadline``.
struct LoopSchedule {
    /// How long after a connection closes the broker gives freed memory back to the system.
    static let trimDelayMilliseconds: Int64 = 1_000
    /// How long the trim may wait for a round without requests, after it is due.
    static let trimPostponeMilliseconds: Int64 = 10_000
    /// How often a postponed trim looks again for a quiet round.
    static let trimRetryMilliseconds: Int64 = 100

    let heartbeatMilliseconds: Int64
    let writeIntervalMilliseconds: Int64
    private(set) var nextHeartbeat: BrokerTime
    /// When the changes noted so far go to the store (`nil`: none noted yet).
    private(set) var nextWrite: BrokerTime?
    private(set) var trimAt: BrokerTime?
    /// The latest a postponed trim waits for a quiet round.
    private var trimLatest: BrokerTime?

    /// The heartbeat is due at `start`, at once.
    init(heartbeatMilliseconds: Int64, writeIntervalMilliseconds: Int64, start: BrokerTime) {
        self.heartbeatMilliseconds = heartbeatMilliseconds
        self.writeIntervalMilliseconds = writeIntervalMilliseconds
        nextHeartbeat = start
    }

    /// The earliest of the timers, and of `other` (the machine's own deadlines).
    func nextDeadline(with other: BrokerTime?) -> BrokerTime {
        var deadline = min(other ?? nextHeartbeat, nextHeartbeat)
        if let nextWrite { deadline = min(deadline, nextWrite) }
        if let trimAt { deadline = min(deadline, trimAt) }
        return deadline
    }

    /// Whether the broker heartbeat goes out at `now`; if so, the next is one interval later. However far the
    /// clock jumped, that is one heartbeat (a year's advance is not 31 million of them).
    mutating func heartbeatDue(now: BrokerTime) -> Bool {
        guard now >= nextHeartbeat else { return false }
        nextHeartbeat = now + heartbeatMilliseconds
        return true
    }

    /// Whether the noted changes go to the store at `now`: once per write interval after the first change noted,
    /// in one batch.
    mutating func writeDue(now: BrokerTime, hasChanges: Bool) -> Bool {
        guard hasChanges else { return false }
        if let due = nextWrite, now >= due {
            nextWrite = nil
            return true
        }
        if nextWrite == nil { nextWrite = now + writeIntervalMilliseconds }
        return false
    }

    /// A connection closed at `now`: libzmq frees its pipes just after, so a trim falls due a little later.
    mutating func connectionClosed(now: BrokerTime) {
        if trimAt == nil { trimAt = now + Self.trimDelayMilliseconds }
    }

    /// Whether to give freed memory back now: at a quiet round once due; while the loop is `busy` (maybe with the
    /// closed connections' last requests, whose replies it frees) it waits, for at most
    /// ``trimPostponeMilliseconds``.
    mutating func trimDue(now: BrokerTime, busy: Bool) -> Bool {
        guard let due = trimAt, now >= due else { return false }
        let latest = trimLatest ?? now + Self.trimPostponeMilliseconds
        if busy && now < latest {
            trimLatest = latest
            trimAt = now + Self.trimRetryMilliseconds
            return false
        }
        (trimAt, trimLatest) = (nil, nil)
        return true
    }
}
