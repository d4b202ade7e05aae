import RollCallCore
import RollCallWire

/// The loop's side of the machine: carrying out its effects, and publishing.
extension EventLoop {
    /// Carries out the machine's effects in order, and those that carrying them out adds (a WebSocket subscriber
    /// too slow for a publication is dropped at the start of the next round, not in the middle of this one).
    /// Publications wait until the presence log holds what they show (Machine/PublicationHold.swift).
    func carryOutEffects() {
        guard !effects.isCarrying else { return }  // the outer call takes what is added
        let logged = store?.logged ?? .max
        let monotonic = machine.hold == nil ? 0 : signals.beat.now
        guard machine.hasEffects(logged: logged, monotonic: monotonic) else { return }
        effects.isCarrying = true
        defer { effects.isCarrying = false }
        // Consecutive group messages come from one output of a core and show the same records: each record is
        // encoded once for all of them.
        var recordCache: [UserID: [UInt8]] = [:]
        while machine.takeEffects(into: &effects.carrying, logged: logged, monotonic: monotonic) {
            for effect in effects.carrying {
                if case .publishGroup = effect {} else if !recordCache.isEmpty { recordCache.removeAll() }
                switch effect {
                case .publish(let record): publish(record, replay: false)
                case .publishGroup(let update, let now): publish(update, recordCache: &recordCache, now: now)
                case .clusterWrite(let write): cluster?.node.write(write)
                case .publishHeartbeat: publish(Topic.broker.bytes, .heartbeat)
                case .warning(let message, let metadata):
                    logger.warning("\(message)", metadata: metadata.mapValues { .string($0) })
                case .notice(let message, let metadata):
                    logger.notice("\(message)", metadata: metadata.mapValues { .string($0) })
                case .sessionSteps(let events): logger.debug(events)
                case .publishViews(let record): publish(record, replay: true)
                case .resendViews(let before):
                    webSockets.resendViews(since: before, core: machine.published, now: clock.now())
                    if !updates.viewers.isEmpty {
                        let views = updates.viewers.changedViews(since: before, in: machine.published, now: clock.now())
                        publishCopies(of: .presence(before.user), views, encode: Codec.encodeRecord)
                    }
                case .answer(let ticket, let result): answerAwaited(ticket, result)
                }
            }
            effects.carrying.removeAll(keepingCapacity: true)
        }
    }

    /// Sends a record to its user's topic. A user with privacy settings goes on the update socket's truth topic, which
    /// only readers, operators and open access hold, to each `user` key following it as its viewer may see it, and to
    /// each WebSocket subscriber likewise; a user without goes once for all (on `presence/<user>/*/` while `user` keys
    /// follow it: Machine/UpdateViewers.swift).
    func publish(_ record: PresenceRecord, replay: Bool) {
        let bytes = Codec.encodeRecord(record)
        let body = PendingPublications.Body.bytes(bytes)
        let delivery =
            updates.viewers.isEmpty
            ? .truth : updates.viewers.delivery(of: record, replay: replay, in: machine.published, now: clock.now())
        let onUpdates = delivery == .forEveryone ? Topic.presence(record.user).forEveryone : nil
        if replay || machine.restricts(record.user) {
            publish(Topic.presence(record.user).bytes, body, toWebSockets: false, onUpdates: onUpdates)
            webSockets.deliverViews(of: record, replay: replay, core: machine.published, now: clock.now())
        } else {
            publish(Topic.presence(record.user).bytes, body, onUpdates: onUpdates)
        }
        if case .copies(let copies) = delivery {
            publishCopies(of: .presence(record.user), copies) { $0 == record ? bytes : Codec.encodeRecord($0) }
        }
        updates.remember(record)
    }

    /// Sends each viewer's copy of a message to the viewer's own form of `topic` on the update socket; copies alike
    /// are encoded once.
    func publishCopies<Message: Equatable>(
        of topic: Topic, _ copies: [UpdateViewers.Copy<Message>], encode: (Message) -> [UInt8]
    ) {
        var encoded: [(Message, [UInt8])] = []
        for copy in copies {
            let bytes =
                encoded.first { $0.0 == copy.message }?.1
                ?? {
                    let bytes = encode(copy.message)
                    encoded.append((copy.message, bytes))
                    return bytes
                }()
            updates.publish(topic.copy(for: copy.viewer), .bytes(bytes), now: clock.now(), heartbeat: heartbeatBody)
        }
    }

    /// Sends a group message, split into parts of at most ``BrokerConfiguration/maxGroupMessageBytes`` when its
    /// changes do not fit in one; each later part takes a new group seq (docs/groups.md).
    func publish(_ update: GroupUpdate, recordCache: inout [UserID: [UInt8]], now: BrokerTime) {
        let parts = Codec.splitGroupUpdate(
            update, recordCache: &recordCache, maxBytes: BrokerConfiguration.maxGroupMessageBytes)
        for (index, var part) in parts.enumerated() {
            // A later part takes a new, larger seq, so that the group seq rule applies every part.
            if index > 0 { part.seq = machine.issueGroupSeq(update.group, now: now) }
            let body = Codec.encodeGroupUpdate(part, recordCache: &recordCache)
            let topic = Topic.group(update.group)
            let delivery =
                updates.viewers.isEmpty ? .truth : updates.viewers.delivery(of: part, in: machine.published, now: now)
            // The WebSocket subscribers get their own views: a member's may differ, a former member's is nothing.
            publish(
                topic.bytes, .bytes(body), toWebSockets: false,
                onUpdates: delivery == .forEveryone ? topic.forEveryone : nil)
            if webSockets.hasSubscribers {
                webSockets.deliverViews(of: part, body: body, core: machine.published, now: now)
            }
            if case .copies(let copies) = delivery {
                publishCopies(of: topic, copies) { view in
                    var own: [UserID: [UInt8]] = [:]  // views' records differ from the shared ones
                    return view == part ? body : Codec.encodeGroupUpdate(view, recordCache: &own)
                }
            }
        }
    }

    /// Sends a message on the update socket (on `onUpdates` when given) and, unless they get their own views, to the
    /// WebSocket subscribers of its topic.
    func publish(
        _ topic: [UInt8], _ body: PendingPublications.Body, toWebSockets: Bool = true, onUpdates: [UInt8]? = nil
    ) {
        if toWebSockets, webSockets.hasSubscribers {
            webSockets.deliverPublished(topic) { updates.bytes(of: body, heartbeatBody) }
        }
        updates.publish(onUpdates ?? topic, body, now: clock.now(), heartbeat: heartbeatBody)
    }

    /// The broker heartbeat's body as it leaves (``BrokerMachine/heartbeat(now:dropped:)``).
    func heartbeatBody(dropped: UInt64) -> [UInt8] {
        Codec.encodeBrokerHeartbeat(machine.heartbeat(now: clock.now(), dropped: dropped))
    }

    /// Publishes what a subscriber of `topic` gets at once: the current record, group aggregate or heartbeat.
    func replay(_ topic: Topic) {
        switch topic {
        case .presence, .group:
            machine.replay(topic, now: clock.now())
            carryOutEffects()
        case .broker: publish(Topic.broker.bytes, .heartbeat)  // a new subscriber learns the epoch at once
        case .allPresence: break
        }
    }
}
