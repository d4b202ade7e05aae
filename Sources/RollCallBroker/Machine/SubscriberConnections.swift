/// The update socket's connections (CURVE only), from its monitor: which are open (a revocation may close them,
/// EventLoop+Security.swift), and which may have sent subscriptions, whose leaving makes applying what waits in the
/// XPUB unsafe in libzmq 4.3.4 (``ManualSubscriptionGate``). A pure state machine over the monitor's events.
///
/// Only a connection whose CURVE handshake succeeded has a pipe, and so subscriptions. libzmq's
/// `HANDSHAKE_SUCCEEDED` event carries no descriptor (its value is 0), so it is put down to the connections accepted
/// and not yet settled: to the only one if there is one, else to all of them (one of them is it; the others are
/// taken for subscribers too, which can only make the gate refuse more). A connection still unsettled when it closes
/// never completed its handshake: its close is harmless. So while handshakes do not overlap every close is judged
/// exactly, and when they do the judgement errs on the safe side.
struct SubscriberConnections: Equatable {
    /// Open connections whose handshake has not been put down to them.
    private(set) var unsettled: Set<Int32> = []
    /// Open connections that completed their handshake, or may have.
    private(set) var subscribers: Set<Int32> = []

    /// Every open connection of the update socket.
    var open: Set<Int32> { unsettled.union(subscribers) }

    /// A connection was accepted (`ACCEPTED`, with its descriptor).
    mutating func accepted(_ descriptor: Int32) {
        subscribers.remove(descriptor)  // a descriptor reused after a close the monitor reported
        unsettled.insert(descriptor)
    }

    /// A handshake succeeded (`HANDSHAKE_SUCCEEDED`, without a descriptor).
    mutating func handshakeSucceeded() {
        subscribers.formUnion(unsettled)
        unsettled.removeAll()
    }

    /// A connection closed (`DISCONNECTED`, with its descriptor); whether it may have left subscriptions waiting.
    mutating func disconnected(_ descriptor: Int32) -> Bool {
        unsettled.remove(descriptor)
        return subscribers.remove(descriptor) != nil
    }
}
