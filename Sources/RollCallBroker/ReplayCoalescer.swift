import RollCallCore
import RollCallWire

/// Spaces out what a subscription makes the broker publish (a last value, a group aggregate, a heartbeat on
/// `broker/`): at most one per topic per interval. A subscription inside the interval is answered when it closes,
/// together with every other one that came meanwhile, so a subscriber still gets the current state, and no flood
/// of subscriptions can multiply the traffic on a topic.
struct ReplayCoalescer {
    let interval: Int64
    /// When each topic last had a replay, for topics that had one within about the interval.
    private var last: [Topic: Int64] = [:]
    /// Replays waiting for their topic's interval to close, with the time it closes.
    private var waiting: [Topic: Int64] = [:]
    private var pruneAt = 65_536
    /// The earliest time a waiting replay is due.
    private(set) var nextDue: Int64?

    init(interval: Int64) { self.interval = interval }

    /// Whether to send the replay for `topic` now; if not, it is sent by ``takeDue(now:)`` later.
    mutating func request(_ topic: Topic, now: Int64) -> Bool {
        if waiting[topic] != nil { return false }
        if let at = last[topic], now - at < interval {
            let due = at + interval
            waiting[topic] = due
            nextDue = min(nextDue ?? due, due)
            return false
        }
        last[topic] = now
        if last.count > pruneAt {
            // Forget topics whose interval has closed; a flood of distinct topics only makes this rarer.
            last = last.filter { now - $0.value < interval }
            pruneAt = max(65_536, last.count * 2)
        }
        return true
    }

    /// The waiting replays that are due at `now`.
    mutating func takeDue(now: Int64) -> [Topic] {
        guard let due = nextDue, due <= now else { return [] }
        nextDue = nil
        var ready: [Topic] = []
        for (topic, at) in waiting {
            if at <= now {
                ready.append(topic)
            } else {
                nextDue = min(nextDue ?? at, at)
            }
        }
        for topic in ready {
            waiting[topic] = nil
            last[topic] = now
        }
        return ready
    }
}
