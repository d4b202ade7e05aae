/// Which subscription messages the loop may apply with the XPUB in manual mode (CURVE): a pure state machine.
///
/// In manual mode libzmq 4.3.4 applies a `ZMQ_SUBSCRIBE` to the connection of the last message read, which it keeps
/// in a queue of connections beside the queue of messages. Two things put that queue out of step with the messages
/// until both have been read empty:
/// - a message that is not a subscription (an XSUB peer may send any bytes) enters the message queue only, so every
///   later read names a connection further along: a subscription authorized for one key would land on another
///   connection;
/// - a subscriber that disconnects while its subscriptions wait in the queue is freed, but the queue keeps its
///   address (fixed only in libzmq 4.3.5, commit 2df7ab6a): applying one of them would write to freed memory.
/// So from either event until the XPUB has nothing left to read, the gate applies nothing. A subscription refused that
/// way gets no last value; its client subscribes again (protocol §16.3).
struct ManualSubscriptionGate: Equatable {
    /// Whether the queues may be out of step since the XPUB last had nothing to read.
    private(set) var unsafe = false

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
            unsafe = true
            return .ignore
        case .unsubscribe(fromPeer: false):
            return .ignore
        case .unsubscribe(fromPeer: true):
            return unsafe ? .refuse : .apply
        case .subscribe:
            return allowed && !unsafe ? .apply : .refuse
        }
    }

    /// A subscriber disconnected (the XPUB's monitor said so): some of what waits may be its subscriptions.
    mutating func subscriberLeft() { unsafe = true }

    /// The XPUB had nothing left to read: libzmq's two queues are in step again.
    mutating func drained() { unsafe = false }
}
