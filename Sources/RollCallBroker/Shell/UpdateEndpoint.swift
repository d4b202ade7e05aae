import DequeModule
import Logging
import RollCallCore
import RollCallSecurity
import RollCallWire
import ZeroMQ

/// The update endpoint (XPUB) and all it keeps: what it publishes, paced against full subscribers
/// (``PendingPublications``), and the subscriptions it reads, authorized one by one with CURVE.
///
/// Publishing is a plain non-blocking send while every subscriber keeps up; otherwise messages wait in order and go
/// out as subscribers take them, past a subscriber that stalls for `--update-stall-ms`.
///
/// A subscription to `presence/<user>/` makes the broker publish that user's record (last value on subscribe), one to
/// `group/<id>/` the group's aggregate, one to `broker/` a heartbeat; XPUB_VERBOSE passes every subscription, also a
/// topic's second subscriber. These replays are coalesced per topic on the monotonic clock (``ReplayCoalescer``), so
/// that a flood of subscriptions cannot multiply them. With CURVE the XPUB is in manual mode: libzmq applies nothing
/// by itself, and the endpoint applies each subscription the key may make before it reads the next message, since
/// libzmq applies it to the connection that sent the last one read (libzmq#1568), as far as
/// ``ManualSubscriptionGate`` finds it safe.
final class UpdateEndpoint {
    private let xpub: Socket
    /// With CURVE: the XPUB's accepted, handshake and disconnect events.
    private let monitor: Socket?
    private let logger: Logger
    private let metrics: BrokerMetrics
    private let queueBytes: Int
    private let stallMilliseconds: Int64
    /// Updates waiting for full subscribers.
    private var pending = PendingPublications()
    /// Messages published on the update socket since the start.
    private(set) var publishedCount: UInt64 = 0
    /// The latest records published, for the status page.
    private(set) var recentRecords = Deque<PresenceRecord>()
    static let recentLimit = 50
    /// Topics that have at least one subscriber, as the XPUB reports them (Machine/TopicCounts.swift).
    private(set) var topics: TopicCounts
    /// Last values and heartbeats asked for by subscriptions, at most one per topic per interval.
    private var replays = ReplayCoalescer(interval: BrokerConfiguration.replayIntervalMilliseconds)
    /// What may be applied in the XPUB's manual mode (CURVE), and when a subscriber's stray message was last logged.
    private var gate = ManualSubscriptionGate()
    private var strayWarnings = WarningThrottle()
    /// The XPUB's connections (CURVE only): open ones, and those that may have subscriptions.
    private(set) var connections = SubscriberConnections()
    /// The `user` keys following each user (CURVE only), to whom copies of users with privacy settings go.
    private(set) var viewers = UpdateViewers()

    init(xpub: Socket, monitor: Socket?, configuration: BrokerConfiguration, logger: Logger, metrics: BrokerMetrics) {
        self.xpub = xpub
        self.monitor = monitor
        self.logger = logger
        self.metrics = metrics
        queueBytes = configuration.updateQueueBytes
        stallMilliseconds = configuration.updateStallMilliseconds
        topics = TopicCounts(manual: monitor != nil)
    }

    /// Whether messages wait for full subscribers (the loop then comes back every millisecond).
    var isPacing: Bool { !pending.isEmpty }
    /// Messages sent past full subscribers, for the heartbeat.
    var dropped: UInt64 { pending.dropped }
    /// When the next coalesced replay is due, on the monotonic clock.
    var nextReplayDue: Int64? { replays.nextDue }

    // MARK: Publishing

    /// Sends `body` on `topic`, or queues it behind the messages that wait for full subscribers. `heartbeat` writes a
    /// heartbeat's body, given the count of dropped messages, when it leaves.
    func publish(
        _ topic: [UInt8], _ body: PendingPublications.Body, now: @autoclosure () -> BrokerTime,
        heartbeat: (UInt64) -> [UInt8]
    ) {
        publishedCount += 1
        switch topic.first {  // presence/, group/ or broker/
        case UInt8(ascii: "p"): metrics.published(.presence)
        case UInt8(ascii: "g"): metrics.published(.group)
        default: metrics.published(.broker)
        }
        // The fast path: nothing waits, so order allows sending at once.
        if pending.isEmpty, transmit(topic, body, heartbeat) != .full { return }
        let now = now()
        pending.append(
            .init(
                topic: topic, body: body, size: PendingPublications.size(topic: topic, body: body), queuedAt: now))
        if pending.bytes > queueBytes { flush(now: now, heartbeat: heartbeat) }
    }

    /// Keeps a published record for the status page.
    func remember(_ record: PresenceRecord) {
        recentRecords.append(record)
        if recentRecords.count > Self.recentLimit { recentRecords.removeFirst() }
    }

    /// Sends what waits, in order, as far as subscribers take it; sends a message past full subscribers once it
    /// has waited `--update-stall-ms`, or while the queue is over its bytes. Called every round while anything waits.
    func flush(now: BrokerTime, heartbeat: (UInt64) -> [UInt8]) {
        while let head = pending.head {
            if transmit(head.topic, head.body, heartbeat) == .full {
                guard now - head.queuedAt >= stallMilliseconds || pending.bytes > queueBytes else { return }
                transmitLossily(head.topic, head.body, heartbeat)
                if pending.lastWarning.map({ now - $0 >= 10_000 }) ?? true {
                    pending.lastWarning = now
                    logger.warning(
                        "a subscriber is full: sending on without it",
                        metadata: ["waiting": "\(pending.entries.count)", "dropped": "\(pending.dropped)"])
                }
            }
            pending.removeHead()
        }
    }

    private enum Transmission { case sent, full, failed }

    /// One attempt with `ZMQ_XPUB_NODROP` on: `.full` when a subscriber the message matches is at its high-water
    /// mark, and nothing was sent.
    private func transmit(
        _ topic: [UInt8], _ body: PendingPublications.Body, _ heartbeat: (UInt64) -> [UInt8]
    ) -> Transmission {
        do {
            guard try xpub.send(topic, more: true) else { return .full }
            // Once the first frame is queued the second always is: a high-water mark counts whole messages.
            try xpub.send(bytes(of: body, heartbeat))
            return .sent
        } catch {
            logger.error(
                "publishing failed",
                metadata: ["topic": "\(String(decoding: topic, as: UTF8.self))", "error": "\(error)"])
            return .failed
        }
    }

    /// Sends past full subscribers (they miss the message), and counts the miss for the heartbeat.
    private func transmitLossily(
        _ topic: [UInt8], _ body: PendingPublications.Body, _ heartbeat: (UInt64) -> [UInt8]
    ) {
        pending.dropped += 1
        do {
            try xpub.set(.xpubNoDrop(false))
            defer { try? xpub.set(.xpubNoDrop(true)) }
            if try xpub.send(topic, more: true) { try xpub.send(bytes(of: body, heartbeat)) }
        } catch {
            logger.error(
                "publishing failed",
                metadata: ["topic": "\(String(decoding: topic, as: UTF8.self))", "error": "\(error)"])
        }
    }

    /// A message's body as it leaves: a heartbeat's is written now, so that its `dropped` covers everything before.
    func bytes(of body: PendingPublications.Body, _ heartbeat: (UInt64) -> [UInt8]) -> [UInt8] {
        switch body {
        case .bytes(let bytes): bytes
        case .heartbeat: heartbeat(pending.dropped)
        }
    }

    // MARK: Subscriptions

    /// Reads subscription changes, up to `batch`, and returns the topics whose last value goes out now (the others
    /// wait for their coalesced replay: ``takeDueReplays(now:)``). `monotonic` is the loop heartbeat's clock.
    func readSubscriptions(
        batch: Int, now: BrokerTime, monotonic: Int64, access: (String?) -> Access,
        isMember: (UserID, GroupID) -> Bool
    ) throws -> [Topic] {
        let manual = monitor != nil
        var replayNow: [Topic] = []
        for _ in 0..<batch {
            // In manual mode every frame on its own: libzmq takes any frame that starts with 0 or 1 for a
            // (un)subscription, a later frame of a peer's multipart message too, and reports it when the peer
            // leaves, so each must be counted (Machine/UpdateViewers.swift).
            let received =
                manual
                ? try xpub.receiveFrame(userID: true) : try xpub.receiveMessage(maxFrames: 1).map { $0.frames[0] }
            guard let frame = received else {
                if manual { gate.drained() }
                break
            }
            let first = frame.bytes.first
            if manual {
                // Before anything is applied: a subscriber gone since the XPUB was last read empty may have left
                // subscriptions in the queue (ManualSubscriptionGate.swift). A monitor that cannot be read may hide
                // one.
                do { try noteDisconnects() } catch { gate.subscriberLeft() }
                guard authorize(frame, now: now, access: access, isMember: isMember) else { continue }
            } else if first.map({ $0 > 1 }) ?? true {
                continue
            }
            let topicBytes = frame.bytes.dropFirst()
            guard first == 1 else {
                if topics.unsubscribed(topicBytes) {
                    logger.debug("topic has no subscriber left", metadata: ["topic": "\(Self.printable(topicBytes))"])
                }
                continue
            }
            topics.subscribed(topicBytes)
            guard let topic = Topic(subscription: topicBytes) else { continue }
            switch topic {
            case .allPresence:
                logger.debug("subscribed to every user")
            case .presence, .group, .broker:
                logger.debug("subscribed", metadata: ["topic": "\(topic.text)"])
                if replays.request(topic, now: monotonic) { replayNow.append(topic) }
            }
        }
        return replayNow
    }

    /// Whether the last value of `topic` goes out now (else it is coalesced into a later replay).
    func requestReplay(_ topic: Topic, monotonic: Int64) -> Bool {
        replays.request(topic, now: monotonic)
    }

    /// The replays whose topic's interval has closed.
    func takeDueReplays(monotonic: Int64) -> [Topic] {
        replays.nextDue == nil ? [] : replays.takeDue(now: monotonic)
    }

    /// Reads the XPUB monitor's pending events (CURVE only): a disconnect makes the gate apply nothing until the
    /// XPUB is read empty. libzmq writes the event before it tells the XPUB to free the connection, so a connection
    /// freed before a subscription is applied has always been seen here by then. Whether the XPUB must be read empty
    /// now (a subscriber left while subscriptions may wait in it).
    @discardableResult
    func noteDisconnects() throws -> Bool {
        guard let monitor else { return false }
        while let event = try monitor.receiveMonitorEvent() {
            switch event.kind {
            case .accepted:
                connections.accepted(event.value)
            case .handshakeSucceeded:
                connections.handshakeSucceeded()
            case .disconnected:
                // A connection that never completed its handshake never had a subscription queued.
                if connections.disconnected(event.value) { gate.subscriberLeft() }
            default:
                break
            }
        }
        return gate.unsafe
    }

    /// In manual mode, applies a subscription or unsubscription if the connection's key allows it and it is safe
    /// (``ManualSubscriptionGate``); whether to go on with it (count it, send its last value).
    private func authorize(
        _ frame: Socket.Frame, now: BrokerTime, access: (String?) -> Access, isMember: (UserID, GroupID) -> Bool
    ) -> Bool {
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
        let key = access(frame.userID)
        var allowed = true
        if case .subscribe = message {
            allowed = Authorization.allowsSubscription(to: topic, by: key, isMember: isMember)
        }
        let decision = gate.decide(message, allowed: allowed)
        // A `user` key follows a user or a group through forms of its topic it may hold for ever
        // (Machine/UpdateViewers.swift).
        var applied = [Array(topic)]
        if let followed = Topic(subscription: topic), followed.hasViewerForms {
            let viewer: UserID? = if case .role(.user(let viewer)) = key, decision == .apply { viewer } else { nil }
            switch message {
            case .subscribe: viewers.subscribed(to: followed, by: viewer)
            case .unsubscribe(fromPeer: false): viewers.subscriberLeft(followed)
            case .unsubscribe(fromPeer: true), .other: break  // a viewer stays listed (UpdateViewers.swift)
            }
            if let viewer { applied = [followed.forEveryone, followed.copy(for: viewer)] }
        }
        switch decision {
        case .ignore where message == .other:
            metrics.refusedSubscription()
            if strayWarnings.allows(now: now) {
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
                for topic in applied { try xpub.set(bytes[0] == 1 ? .subscribe(topic) : .unsubscribe(topic)) }
            } catch {
                logger.error("(un)subscribe failed", metadata: ["error": "\(error)"])
                return false
            }
            return true
        }
    }

    /// Shuts down every open update connection from a peer address that the keys a reload removed passed ZAP from.
    /// The XPUB does not say which connection a key's subscriptions came on (its messages carry no `ZMQ_SRCFD`), so an
    /// authorized subscriber from the same address goes too, and reconnects and subscribes again by itself (libzmq's
    /// SUB does). Done before any end is published, so that the removed keys receive nothing from the reload on.
    func shutDownConnections(revokedBy reload: CurveGate.Reload) {
        var closed = 0
        for descriptor in connections.open.sorted()
        where reload.mayBeRevoked(address: ConnectionDescriptor.peerAddress(descriptor)) {
            if ConnectionDescriptor.shutDown(descriptor) { closed += 1 }
        }
        logger.notice(
            """
            update connections closed from the addresses of the keys removed or given another role (authorized \
            subscribers among them reconnect)
            """,
            metadata: [
                "update_connections_closed": "\(closed)",
                "addresses": "\(reload.anyAddress ? "any" : reload.addresses.sorted().joined(separator: ","))",
            ])
    }

    /// A subscription's bytes for a log line: printable ASCII kept, anything else as `?`, at most 64 characters.
    static func printable(_ bytes: ArraySlice<UInt8>) -> String {
        String(bytes.prefix(64).map { $0 >= 0x20 && $0 < 0x7F ? Character(UnicodeScalar($0)) : "?" })
    }
}
