import Logging
import RollCallCore
import RollCallSecurity
import RollCallWire
import ZeroMQ

extension EventLoop {
    /// Reads subscription changes from the XPUB. A subscription to `presence/<user>/` makes the broker publish that
    /// user's record (last value on subscribe), one to `group/<id>/` the group's aggregate, one to `broker/` a
    /// heartbeat; XPUB_VERBOSE passes every subscription, also a topic's second subscriber. These replays are
    /// coalesced per topic (``ReplayCoalescer``), so that a flood of subscriptions cannot multiply them.
    ///
    /// With CURVE the XPUB is in manual mode: libzmq applies nothing by itself, and the loop applies each
    /// subscription the key may make (``Authorization/allowsSubscription(to:by:)``) before it reads the next
    /// message, since libzmq applies it to the connection that sent the last one read (libzmq#1568), as far as
    /// ``ManualSubscriptionGate`` finds it safe.
    func handleSubscriptions() throws {
        let manual = curve.keys != nil
        for _ in 0..<Self.batch {
            guard let (frames, _) = try sockets.xpub.receiveMessage(maxFrames: 1, userID: manual) else {
                if manual { subscriptionGate.drained() }
                return
            }
            let first = frames[0].bytes.first
            if manual {
                // Before anything is applied: a subscriber gone since the XPUB was last read empty may have left
                // subscriptions in the queue (ManualSubscriptionGate.swift).
                try noteSubscriberDisconnects()
                guard authorize(frames[0]) else { continue }
            } else if first.map({ $0 > 1 }) ?? true {
                continue
            }
            let topicBytes = frames[0].bytes.dropFirst()
            guard first == 1 else {
                if subscribedTopics.unsubscribed(topicBytes) {
                    logger.debug("topic has no subscriber left", metadata: ["topic": "\(Self.printable(topicBytes))"])
                }
                continue
            }
            subscribedTopics.subscribed(topicBytes)
            guard let topic = Topic(subscription: topicBytes) else { continue }
            switch topic {
            case .allPresence:
                logger.debug("subscribed to every user")
            case .presence, .group, .broker:
                logger.debug("subscribed", metadata: ["topic": "\(topic.text)"])
                if replays.request(topic, now: loopBeat.now) { replay(topic) }
            }
        }
    }

    /// Reads the XPUB monitor's pending events (CURVE only): a disconnect makes the gate apply nothing until the
    /// XPUB is read empty. libzmq writes the event before it tells the XPUB to free the connection, so a connection
    /// freed before a subscription is applied has always been seen here by then.
    func noteSubscriberDisconnects() throws {
        guard let xpubMonitor = sockets.xpubMonitor else { return }
        while let event = try xpubMonitor.receiveMonitorEvent() {
            switch event.kind {
            case .accepted:
                subscriberConnections.accepted(event.value)
            case .handshakeSucceeded:
                subscriberConnections.handshakeSucceeded()
            case .disconnected:
                // A connection that never completed its handshake never had a subscription queued.
                if subscriberConnections.disconnected(event.value) { subscriptionGate.subscriberLeft() }
            default:
                break
            }
        }
    }

    /// In manual mode, applies a subscription or unsubscription if the connection's key allows it and it is safe
    /// (``ManualSubscriptionGate``); whether the loop should go on with it (count it, send its last value).
    private func authorize(_ frame: Socket.Frame) -> Bool {
        let bytes = frame.bytes
        let topic = bytes.dropFirst()
        let message: ManualSubscriptionGate.Message
        switch bytes.first {
        case 1?:
            switch Topic(subscription: topic) {
            case .presence?, .group?, .broker?: message = .subscribe(exactTopic: true)
            case .allPresence?, nil: message = .subscribe(exactTopic: false)
            }
        case 0?: message = .unsubscribe(fromPeer: frame.userID != nil)
        default: message = .other
        }
        var allowed = true
        if case .subscribe = message {
            allowed = Authorization.allowsSubscription(
                to: topic, by: access(userID: frame.userID), isMember: { machine.isMember($0, of: $1) })
        }
        switch subscriptionGate.decide(message, allowed: allowed) {
        case .ignore where message == .other:
            metrics.refusedSubscription()
            let now = clock.now()
            if subscriptionWarnings.allows(now: now) {
                logger.warning(
                    """
                    a subscriber sent a message that is not a subscription; until the update endpoint is read empty, \
                    only exact topics are applied (logged at most every 10 s)
                    """,
                    metadata: ["key": "\(frame.userID.flatMap(CurveKey.init).map(\.description) ?? "-")"])
            }
            return false
        case .ignore:
            return true  // libzmq's own unsubscription at a disconnect: counted, nothing to apply
        case .refuse:
            metrics.refusedSubscription()
            logger.debug("subscription not applied", metadata: ["topic": "\(Self.printable(topic))"])
            return false
        case .apply:
            do {
                try sockets.xpub.set(bytes[0] == 1 ? .subscribe(Array(topic)) : .unsubscribe(Array(topic)))
            } catch {
                logger.error("(un)subscribe failed", metadata: ["error": "\(error)"])
                return false
            }
            return true
        }
    }

    /// Publishes the replays whose topic's interval has closed (on the monotonic clock: ReplayCoalescer.swift).
    func publishDueReplays() {
        guard replays.nextDue != nil else { return }
        for topic in replays.takeDue(now: loopBeat.now) { replay(topic) }
    }

    /// Publishes what a subscriber of `topic` gets at once: the current record, group aggregate or heartbeat.
    func replay(_ topic: Topic) {
        switch topic {
        case .presence, .group:
            machine.replay(topic, now: clock.now())
            carryOutEffects()
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
