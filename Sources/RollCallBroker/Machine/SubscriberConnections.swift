/// The update socket's connections (CURVE only), from its monitor: which are open (a revocation may close them,
/// Shell/UpdateEndpoint.swift), and which may have sent subscriptions, whose leaving makes applying what waits in the
/// XPUB unsafe in libzmq 4.3.4 (``ManualSubscriptionGate``). A pure state machine over the monitor's events.
///
/// Only a connection whose CURVE handshake succeeded has a pipe, and so subscriptions. libzmq's
/// `HANDSHAKE_SUCCEEDED` event carries no descriptor (its value is 0), so it is put down to the connections accepted
/// and not yet settled. With one such connection the success is its own: the usual case, judged exactly. With
/// several (handshakes that overlap, such as a refused key's retries beside a subscriber's) the success is one of
/// them, not known which: they stay undecided, and a close among them counts for nothing, until as few are left as
/// successes were put down to them, which are then subscribers. So a client that fails its handshake never makes
/// the gate drop other subscribers' subscriptions; the price is that a subscriber leaving while still undecided is
/// not noticed (docs/protocol.md §16.6).
struct SubscriberConnections: Equatable {
    /// Open connections whose handshake has not been put down to them.
    private(set) var unsettled: Set<Int32> = []
    /// Open connections that completed their handshake.
    private(set) var subscribers: Set<Int32> = []
    /// Open connections among which ``undecidedSuccesses`` handshakes succeeded, not known which.
    private(set) var undecided: Set<Int32> = []
    private(set) var undecidedSuccesses = 0

    /// Every open connection of the update socket.
    var open: Set<Int32> { unsettled.union(subscribers).union(undecided) }

    /// A connection was accepted (`ACCEPTED`, with its descriptor).
    mutating func accepted(_ descriptor: Int32) {
        // A descriptor reused after a close the monitor reported: its earlier life says nothing about this one.
        subscribers.remove(descriptor)
        if undecided.remove(descriptor) != nil { settle() }
        unsettled.insert(descriptor)
    }

    /// A handshake succeeded (`HANDSHAKE_SUCCEEDED`, without a descriptor).
    mutating func handshakeSucceeded() {
        // It is one of the connections whose handshake was not yet put down: the unsettled, or the undecided.
        if unsettled.count == 1, undecided.isEmpty {
            subscribers.formUnion(unsettled)
        } else if !unsettled.isEmpty || !undecided.isEmpty {
            undecided.formUnion(unsettled)
            undecidedSuccesses += 1
        }
        unsettled.removeAll()
        settle()
    }

    /// A connection closed (`DISCONNECTED`, with its descriptor); whether it had completed its handshake, and so
    /// may have left subscriptions waiting.
    mutating func disconnected(_ descriptor: Int32) -> Bool {
        if unsettled.remove(descriptor) != nil { return false }
        if subscribers.remove(descriptor) != nil { return true }
        if undecided.remove(descriptor) != nil { settle() }
        return false
    }

    /// Undecided connections no more numerous than the successes among them are all subscribers.
    private mutating func settle() {
        guard !undecided.isEmpty, undecided.count <= undecidedSuccesses else {
            if undecided.isEmpty { undecidedSuccesses = 0 }
            return
        }
        subscribers.formUnion(undecided)
        undecided.removeAll()
        undecidedSuccesses = 0
    }
}
