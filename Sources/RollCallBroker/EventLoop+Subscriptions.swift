import Logging
import RollCallCore
import RollCallWire
import ZeroMQ

extension EventLoop {
    /// Reads subscription changes from the XPUB and sends a new subscriber of `presence/<user>/` that user's record
    /// at once (last value on subscribe), and a new subscriber of `group/<id>/` the group's aggregate. XPUB_VERBOSE passes every subscription, also a topic's second subscriber.
    func handleSubscriptions() throws {
        for _ in 0..<Self.batch {
            guard let (frames, _) = try xpub.receiveMessage(maxFrames: 1) else { return }
            guard let first = frames.first?.bytes.first, first == 1 else { continue }  // 0 is an unsubscription
            let topicBytes = frames[0].bytes.dropFirst()
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
