/// The topics of the update socket that have at least one subscriber, for the `rollcall_subscriptions` gauge and the
/// status page, from what the XPUB passes the loop. Without manual mode the XPUB passes every subscription (verbose)
/// but an unsubscription only when a topic's last subscriber leaves, so a set suffices; in manual mode (CURVE) it
/// passes every unsubscription, so subscribers are counted per topic. At most ``limit`` distinct topics are
/// tracked, so that counting is bounded too.
struct TopicCounts {
    /// The most distinct topics tracked.
    let limit: Int
    /// Whether the XPUB is in manual mode.
    let manual: Bool
    private var topics = Set<[UInt8]>()
    private var subscribers: [[UInt8]: Int] = [:]

    init(manual: Bool, limit: Int = 1_000_000) {
        self.manual = manual
        self.limit = limit
    }

    /// The topics with a subscriber.
    var count: Int { topics.count }

    /// A subscription to `topic` was passed.
    mutating func subscribed(_ topic: some Collection<UInt8>) {
        let key = Array(topic)
        guard topics.count < limit || topics.contains(key) else { return }
        topics.insert(key)
        if manual { subscribers[key, default: 0] += 1 }
    }

    /// An unsubscription from `topic` was passed; whether the topic has no subscriber left.
    mutating func unsubscribed(_ topic: some Collection<UInt8>) -> Bool {
        let key = Array(topic)
        if manual {
            guard let count = subscribers[key] else { return false }
            guard count <= 1 else {
                subscribers[key] = count - 1
                return false
            }
            subscribers[key] = nil
        }
        return topics.remove(key) != nil
    }
}
