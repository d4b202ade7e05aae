import Logging
import RollCallCore
import RollCallWire
import ZeroMQ

extension EventLoop {
    /// The most distinct topics counted for the `rollcall_subscriptions` gauge, so that counting is bounded too.
    static let trackedTopicLimit = 1_000_000

    /// Reads subscription changes from the XPUB and sends a new subscriber of `presence/<user>/` that user's record
    /// at once (last value on subscribe), and a new subscriber of `group/<id>/` the group's aggregate. XPUB_VERBOSE passes every subscription, also a topic's second subscriber.
    func handleSubscriptions() throws {
        for _ in 0..<Self.batch {
            guard let (frames, _) = try xpub.receiveMessage(maxFrames: 1) else { return }
            guard let first = frames.first?.bytes.first, first <= 1 else { continue }
            let topicBytes = frames[0].bytes.dropFirst()
            // XPUB passes every subscription (verbose) but an unsubscription only when a topic's last subscriber
            // leaves: what is left in the set is the topics somebody follows.
            guard first == 1 else {
                subscribedTopics.remove(Array(topicBytes))
                continue
            }
            if subscribedTopics.count < Self.trackedTopicLimit { subscribedTopics.insert(Array(topicBytes)) }
            switch Topic(subscription: topicBytes) {
            case .presence(let user):
                logger.debug("subscribed", metadata: ["topic": "\(Topic.presence(user).text)"])
                publish([core.record(of: user, now: clock.now())])
            case .allPresence:
                logger.debug("subscribed to every user")
            case .broker:
                publishHeartbeat(now: clock.now())  // a new subscriber learns the epoch at once
            case .group(let group):
                logger.debug("subscribed", metadata: ["topic": "\(Topic.group(group).text)"])
                publish(core.groupHeader(of: group, now: clock.now()))
            case nil:
                break
            }
        }
    }
}
