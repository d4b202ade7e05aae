/// The presence log's side of the core (docs/history.md): with ``logsTransitions`` on, every record the core makes
/// for a user takes the next offset, and the transition waits in ``takeTransitions()`` for the broker to append it
/// to the log. The core only numbers; keeping the log is the store's.
extension PresenceCore {
    /// Turns the log on, continuing above `lastOffset` (the highest offset the log holds, or any the broker may
    /// have handed out before).
    public mutating func startLog(after lastOffset: UInt64) {
        logsTransitions = true
        self.lastOffset = max(self.lastOffset, lastOffset)
    }

    /// The transitions made since the last call, in offset order.
    public mutating func takeTransitions() -> [LogEntry] {
        defer { transitions.removeAll(keepingCapacity: true) }
        return transitions
    }

    /// Whether transitions wait to be taken.
    public var hasTransitions: Bool { !transitions.isEmpty }

    /// The offset of the latest transition, 0 before any.
    public var logOffset: UInt64 { lastOffset }

    /// The offset a cluster's stamp gives a transition (its place in etcd's history, the same on every node), taken
    /// as the latest.
    mutating func stampedOffset(_ offset: UInt64) -> UInt64 {
        lastOffset = max(lastOffset, offset)
        return offset
    }

    /// Keeps a transition for the log. A second change of one stamp keeps the first's offset (one revision shows
    /// one record per user): its entry replaces the first's, still waiting to be taken in the same round.
    mutating func logTransition(_ entry: LogEntry, again: Bool) {
        if again, let index = transitions.lastIndex(where: { $0.offset == entry.offset }) {
            transitions[index] = entry
        } else {
            transitions.append(entry)
        }
    }

    /// The next offset: one more than the last, and never behind the broker's clock in microseconds, so that after
    /// a crash (which can lose the last offsets handed out before they were written) the numbering continues above
    /// them. The same rule as `seq`'s (``nextSeq(after:now:)``), over the whole log.
    mutating func nextOffset(now: BrokerTime) -> UInt64 {
        lastOffset = nextSeq(after: lastOffset, now: now)
        return lastOffset
    }
}
