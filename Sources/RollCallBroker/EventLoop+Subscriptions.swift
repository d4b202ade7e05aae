import Logging
import RollCallCore
import RollCallWire
import ZeroMQ

extension EventLoop {
    /// The most distinct topics counted for the `rollcall_subscriptions` gauge, so that counting is bounded too.
    static let trackedTopicLimit = 1_000_000

    /// Reads subscription changes from the XPUB. A subscription to `presence/<user>/` makes the broker publish that
    /// user's record (last value on subscribe), one to `group/<id>/` the group's aggregate, one to `broker/` a
    /// heartbeat; XPUB_VERBOSE passes every subscription, also a topic's second subscriber. These replays are
    /// coalesced per topic (``ReplayCoalescer``), so that a flood of subscriptions cannot multiply them.
    func handleSubscriptions() throws {
        for _ in 0..<Self.batch {
            guard let (frames, _) = try xpub.receiveMessage(maxFrames: 1) else { return }
            guard let first = frames.first?.bytes.first, first <= 1 else { continue }
            let topicBytes = frames[0].bytes.dropFirst()
            // XPUB passes every subscription (verbose) but an unsubscription only when a topic's last subscriber
            // leaves: what is left in the set is the topics somebody follows.
            guard first == 1 else {
                if subscribedTopics.remove(Array(topicBytes)) != nil {
                    logger.debug("topic has no subscriber left", metadata: ["topic": "\(Self.printable(topicBytes))"])
                }
                continue
            }
            if subscribedTopics.count < Self.trackedTopicLimit { subscribedTopics.insert(Array(topicBytes)) }
            guard let topic = Topic(subscription: topicBytes) else { continue }
            switch topic {
            case .allPresence:
                logger.debug("subscribed to every user")
            case .presence, .group, .broker:
                logger.debug("subscribed", metadata: ["topic": "\(topic.text)"])
                if replays.request(topic, now: clock.now()) { replay(topic) }
            }
        }
    }

    /// Publishes the replays whose topic's interval has closed.
    func publishDueReplays(now: BrokerTime) {
        for topic in replays.takeDue(now: now) { replay(topic) }
    }

    /// Publishes what a subscriber of `topic` gets at once: the current record, group aggregate or heartbeat.
    func replay(_ topic: Topic) {
        let now = clock.now()
        switch topic {
        case .presence(let user): publish(core.record(of: user, now: now))
        case .group(let group): publish(core.groupHeader(of: group, now: now))
        case .broker: enqueue(Topic.broker.bytes, .heartbeat)  // a new subscriber learns the epoch at once
        case .allPresence: break
        }
    }
}

extension EventLoop {
    /// A subscription's bytes for a log line: printable ASCII kept, anything else as `?`, at most 64 characters.
    static func printable(_ bytes: ArraySlice<UInt8>) -> String {
        String(bytes.prefix(64).map { $0 >= 0x20 && $0 < 0x7F ? Character(UnicodeScalar($0)) : "?" })
    }
}
