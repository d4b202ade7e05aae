import RollCallCore
import RollCallWire
import ZeroMQ

/// Publishing: a plain non-blocking send while every subscriber keeps up; otherwise the pacing described on
/// ``PendingPublications``.
extension EventLoop {
    /// Sends `body` on `topic`, or queues it behind the messages that wait for full subscribers.
    func send(_ topic: Topic, _ body: [UInt8]) {
        enqueue(topic.bytes, .bytes(body))
    }

    /// `toGateway: false`: the WebSocket subscribers get their own views instead (EventLoop+Privacy.swift).
    func enqueue(_ topic: [UInt8], _ body: PendingPublications.Body, toGateway: Bool = true) {
        publishedCount += 1
        switch topic.first {  // presence/, group/ or broker/
        case UInt8(ascii: "p"): metrics.published(.presence)
        case UInt8(ascii: "g"): metrics.published(.group)
        default: metrics.published(.broker)
        }
        if toGateway, !gateway.hasNoSubscribers { deliverToGateway(topic, body) }
        // The fast path: nothing waits, so order allows sending at once.
        if pending.isEmpty, transmit(topic, body) != .full { return }
        let now = clock.now()
        let size = PendingPublications.size(topic: topic, body: body)
        pending.append(.init(topic: topic, body: body, size: size, queuedAt: now))
        if pending.bytes > configuration.updateQueueBytes { flushPublications(now: now) }
    }

    /// Sends what waits, in order, as far as subscribers take it; sends a message past full subscribers once it
    /// has waited `--update-stall-ms`, or while the queue is over its bytes. Called every round; the loop wakes
    /// every millisecond while anything waits.
    func flushPublications(now: BrokerTime) {
        while let head = pending.head {
            if transmit(head.topic, head.body) == .full {
                guard
                    now - head.queuedAt >= configuration.updateStallMilliseconds
                        || pending.bytes > configuration.updateQueueBytes
                else { return }
                transmitLossily(head.topic, head.body)
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

    enum Transmission { case sent, full, failed }

    /// One attempt with `ZMQ_XPUB_NODROP` on: `.full` when a subscriber the message matches is at its high-water
    /// mark, and nothing was sent.
    private func transmit(_ topic: [UInt8], _ body: PendingPublications.Body) -> Transmission {
        do {
            guard try sockets.xpub.send(topic, more: true) else { return .full }
            // Once the first frame is queued the second always is: a high-water mark counts whole messages.
            try sockets.xpub.send(bytes(of: body))
            return .sent
        } catch {
            logger.error(
                "publishing failed",
                metadata: ["topic": "\(String(decoding: topic, as: UTF8.self))", "error": "\(error)"])
            return .failed
        }
    }

    /// Sends past full subscribers (they miss the message), and counts the miss for the heartbeat.
    private func transmitLossily(_ topic: [UInt8], _ body: PendingPublications.Body) {
        pending.dropped += 1
        do {
            try sockets.xpub.set(.xpubNoDrop(false))
            defer { try? sockets.xpub.set(.xpubNoDrop(true)) }
            if try sockets.xpub.send(topic, more: true) { try sockets.xpub.send(bytes(of: body)) }
        } catch {
            logger.error(
                "publishing failed",
                metadata: ["topic": "\(String(decoding: topic, as: UTF8.self))", "error": "\(error)"])
        }
    }

    func bytes(of body: PendingPublications.Body) -> [UInt8] {
        switch body {
        case .bytes(let bytes): bytes
        case .heartbeat: Codec.encodeBrokerHeartbeat(heartbeat(now: clock.now()))
        }
    }

    /// The broker's heartbeat as of `now`, with the counts every subscriber may know of.
    func heartbeat(now: BrokerTime) -> BrokerHeartbeat {
        let counts = machine.published.publicCounts
        return BrokerHeartbeat(
            broker: configuration.brokerID, epoch: epoch, time: now,
            intervalMilliseconds: configuration.brokerHeartbeatMilliseconds,
            usersAvailable: counts.usersAvailable, sessions: counts.sessions,
            dropped: pending.dropped, cluster: machine.publishing.standing)
    }
}
