/// Which subscription messages the loop may apply with the XPUB in manual mode (CURVE): a pure state machine.
///
/// In manual mode libzmq 4.3.4 applies a `ZMQ_SUBSCRIBE` to the connection of the last message read, which it
/// tracks in a queue of connections beside the queue of messages; but a message that is not a subscription (an
/// XSUB peer may send any bytes) enters the message queue without entering the connection queue. Until the messages
/// waiting have all been read, every later read then names a connection further along: a subscription the broker
/// authorized for one key could be applied to another connection, such as a `user` key's, and give it a prefix it
/// may not have. So from such a message until the XPUB has nothing left to read, the gate lets through only what
/// every key may have anyway (exact topics), and no unsubscriptions (which could remove another connection's).
struct ManualSubscriptionGate: Equatable {
    /// Whether a message that is not a subscription was read since the XPUB last had nothing to read.
    private(set) var skewed = false

    enum Message: Equatable {
        /// A subscription (first byte 1) to an exact topic or to another prefix.
        case subscribe(exactTopic: Bool)
        /// An unsubscription (first byte 0); `fromPeer` is false for those libzmq makes itself when a subscriber
        /// leaves (they carry no `User-Id`, and are already done).
        case unsubscribe(fromPeer: Bool)
        /// Anything else: not a subscription.
        case other
    }

    enum Decision: Equatable {
        /// Apply it (`ZMQ_SUBSCRIBE` or `ZMQ_UNSUBSCRIBE`) before the next read.
        case apply
        /// Leave it unapplied: not allowed, or not safe to apply now.
        case refuse
        /// Nothing to apply: libzmq's own unsubscription, or a message that is not a subscription.
        case ignore
    }

    /// The decision for the message just read; `allowed` is whether its key may make it.
    mutating func decide(_ message: Message, allowed: Bool) -> Decision {
        switch message {
        case .other:
            skewed = true
            return .ignore
        case .unsubscribe(fromPeer: false):
            return .ignore
        case .unsubscribe(fromPeer: true):
            return skewed ? .refuse : .apply
        case .subscribe(let exactTopic):
            guard allowed else { return .refuse }
            return skewed && !exactTopic ? .refuse : .apply
        }
    }

    /// The XPUB had nothing left to read: libzmq's two queues are in step again.
    mutating func drained() { skewed = false }
}
