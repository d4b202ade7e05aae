import DequeModule
import Logging
import RollCallCore
import RollCallSecurity
import RollCallStore
import RollCallWire
import Synchronization
import ZeroMQ

/// The one thread that owns the broker's sockets: it polls them with the core's next deadline as the timeout,
/// feeds what arrives to the core, and sends what the core returns. It never waits for a client or subscriber:
/// replies are sent without blocking (libzmq drops them for peers over their high-water mark), and updates that a
/// full subscriber cannot take yet wait in the loop's own bounded queue (EventLoop+Publishing.swift).
final class EventLoop {
    let configuration: BrokerConfiguration
    let epoch: String
    let sockets: LoopSockets
    /// With CURVE: who may connect and what each connection may do (Machine/CurveGate.swift).
    var curve: CurveGate
    /// Refused handshakes are logged at most every 10 s.
    var handshakeWarnings = WarningThrottle()
    /// What may be applied in the XPUB's manual mode (CURVE), and when a subscriber's stray message was last logged.
    var subscriptionGate = ManualSubscriptionGate()
    var subscriptionWarnings = WarningThrottle()
    /// The XPUB's connections (CURVE only): open ones, and those that may have subscriptions
    /// (Machine/SubscriberConnections.swift).
    var subscriberConnections = SubscriberConnections()
    let logger: Logger
    var clock: BrokerClock
    /// The broker's decisions (Machine/BrokerMachine.swift); the loop feeds it and carries out its effects.
    var machine: BrokerMachine
    /// The machine's effects being carried out, swapped with its buffer so that both keep their capacity.
    var carrying: [BrokerMachine.Effect] = []
    var isCarrying = false
    /// The heartbeat, store and trim timers (Machine/LoopSchedule.swift).
    var schedule: LoopSchedule
    let metrics = BrokerMetrics()
    let mailbox: LoopMailbox
    let loopBeat: LoopHeartbeat
    /// When the gauges are next brought up to date, on the loop heartbeat's monotonic clock.
    var nextGaugeUpdate: Int64 = 0
    /// Messages published on the update socket since the start.
    var publishedCount: UInt64 = 0
    /// The latest records published, for the status page.
    var recentRecords = Deque<PresenceRecord>()
    static let recentLimit = 50
    /// Topics that have at least one subscriber, as the XPUB reports them (Machine/TopicCounts.swift).
    var subscribedTopics: TopicCounts
    let writer: StoreWriter?
    /// The presence log, when the broker keeps one (EventLoop+History.swift).
    var history: LoopHistory?
    /// The ROUTER's connections, from the socket monitor (ConnectionTracker.swift, EventLoop+Connections.swift).
    var connections = ConnectionTracker()
    /// Refused connections are logged at most every 10 s.
    var refusalWarnings = WarningThrottle()
    /// Updates waiting for full subscribers (EventLoop+Publishing.swift).
    var pending = PendingPublications()
    /// Last values and heartbeats asked for by subscriptions, at most one per topic per interval.
    var replays = ReplayCoalescer(interval: BrokerConfiguration.replayIntervalMilliseconds)
    /// Expensive requests waiting for their turn, per connection (EventLoop+Fairness.swift).
    var deferred = FairQueue<FairnessKey, DeferredWork>()
    /// WebSocket connections and their subscriptions (EventLoop+Gateway.swift).
    var gateway = GatewayTable()
    /// The node's side of a cluster, on a node of one (EventLoop+Cluster.swift).
    let cluster: ClusterLink?

    /// The most requests handled before the loop looks at subscriptions and deadlines again.
    static let batch = 512

    init(
        configuration: BrokerConfiguration, epoch: String, router: Socket, xpub: Socket, wake: Socket,
        monitor: Socket, zap: Socket? = nil, xpubMonitor: Socket? = nil, store: (any PresenceStore)?, logger: Logger,
        wakeLoop: @escaping @Sendable () -> Void, mailbox: LoopMailbox, heartbeat: LoopHeartbeat,
        cluster: ClusterLink? = nil, contacts: (path: String, lists: [ContactList])? = nil,
        logCommitted: @escaping @Sendable (UInt64) -> Void = { _ in }
    ) throws {
        self.cluster = cluster
        subscribedTopics = TopicCounts(manual: configuration.curve?.authorizedKeys != nil)
        sockets = LoopSockets(
            router: router, xpub: xpub, wake: wake, monitor: monitor, zap: zap, xpubMonitor: xpubMonitor)
        curve = CurveGate(keys: configuration.curve?.authorizedKeys)
        self.mailbox = mailbox
        self.loopBeat = heartbeat
        self.configuration = configuration
        self.epoch = epoch
        self.logger = logger
        var core = PresenceCore(configuration: configuration.presence)
        if let store {
            let kept = try store.load()
            clock = BrokerClock(floor: kept.brokerTime, manual: configuration.testMode)
            core.restore(records: kept.records, groups: kept.groups, now: clock.now())
            core.restorePrivacy(kept.privacy)
            if core.hasPrivacySettings, configuration.curve?.authorizedKeys == nil,
                configuration.webSocket.jwtKeyFile == nil, configuration.webSocket.jwtJwksURL == nil
            {
                // Without keys or tokens every peer is an operator and sees the truth (docs/privacy.md).
                logger.warning(
                    "privacy settings are kept but have no effect: no CURVE keys or WebSocket tokens are configured",
                    metadata: ["users": "\(kept.privacy.count)"])
            }
            logger.info(
                "state restored",
                metadata: [
                    "users": "\(kept.records.count)", "available": "\(core.availableUserCount)",
                    "groups": "\(kept.groups.count)", "skipped": "\(kept.skippedRows)",
                ])
            // The log is kept on a single broker with a data directory (a node of a cluster would number transitions
            // apart from the other nodes: docs/history.md, known weaknesses).
            let keep = configuration.historyRetentionMilliseconds > 0 && cluster == nil
            if let (state, log) = try store.openLog(keep: keep), keep {
                core.startLog(after: state.lastOffset)
                let reader = LogReader(log: try log.readOnlyConnection(), beforeRead: configuration.logReadHook)
                history = LoopHistory(log: log, epoch: state.epoch, reader: reader)
                logger.info(
                    "presence log kept", metadata: ["log_epoch": "\(state.epoch)", "offset": "\(state.lastOffset)"])
            }
            writer = StoreWriter(
                store: store, logger: logger,
                logRetention: history == nil ? nil : configuration.historyRetentionMilliseconds,
                committedOffset: core.logOffset, wakeLoop: wakeLoop, logCommitted: logCommitted,
                logRestarted: { epoch in mailbox.post { loop in loop.adoptLog(epoch: epoch) } })
        } else {
            clock = BrokerClock(manual: configuration.testMode)
            writer = nil
            core.tracksChanges = false  // nothing will take them
        }
        let publishing: Publishing =
            cluster.map { .cluster(ClusterSide(nodeID: $0.settings.nodeID, presence: configuration.presence)) }
            ?? .local
        schedule = LoopSchedule(
            heartbeatMilliseconds: configuration.brokerHeartbeatMilliseconds,
            writeIntervalMilliseconds: configuration.writeIntervalMilliseconds, start: clock.now())
        machine = BrokerMachine(
            configuration: configuration, epoch: epoch, core: core, publishing: publishing,
            logsSessionSteps: logger.logLevel <= .debug)
        machine.logEpoch = history?.epoch
        if let contacts {
            // After the kept state: the file wins for the users it lists. Nobody is subscribed yet, so the views
            // it changes reach no one.
            if case .failure(let refusal) = machine.loadContacts(contacts.lists, now: clock.now()) {
                throw BrokerError.contactsFile(
                    ContactsFileError(path: contacts.path, line: nil, reason: refusal.message))
            }
            machine.effects.removeAll()
            logger.info("contacts file loaded", metadata: ["file": "\(contacts.path)"])
        }
    }

    /// Turns until `stopping` is set, then writes the last changes and closes the sockets. Throws if the loop
    /// failed, or if the last changes could not be written (so that the process exits non-zero and a supervisor
    /// sees the failure).
    func run(stopping: borrowing Atomic<Bool>) throws {
        cluster?.node.start()
        defer {
            // Revokes the node's lease: its sessions end everywhere at once (node_lost). A read in flight is dropped.
            cluster?.node.stop()
            history?.reader?.stop()
            sockets.close()
        }
        do {
            try turn(until: stopping)
        } catch {
            _ = finishWriting()  // shutdown loses nothing, also when the loop fails
            throw error
        }
        // The final write comes before the last log line: a log that cannot be written must not lose it.
        let written = finishWriting()
        logger.info("event loop stopped", metadata: ["sessions": "\(machine.core.sessionCount)"])
        guard written else { throw BrokerError.finalWriteFailed }
    }

    /// Hands the last changes to the store and waits for them; whether everything is stored.
    private func finishWriting() -> Bool {
        guard let writer else { return true }
        writer.enqueue(batch(now: clock.now()).appendingLog(takeTransitions()))
        return writer.finish()
    }

    private func turn(until stopping: borrowing Atomic<Bool>) throws {
        var poller = LoopSockets.ReadinessPoller(sockets)
        while !stopping.load(ordering: .sequentiallyConsistent) {
            let ready = try poller.poll(timeout: pollTimeout())
            let started = ContinuousClock.now
            if ready.wake {
                try sockets.wake.drain()
                for job in mailbox.take() { job(self) }
            }
            if cluster != nil { takeClusterNotifications() }
            if !gateway.dropping.isEmpty { dropSlowGatewayConnections() }
            // Handshakes first: a client waits for the answer before it can send anything.
            if ready.handshakes { try handleAuthentication() }
            if ready.subscriberDisconnects {
                // A subscriber left: what waits in the XPUB now is read at once and refused, so that the gate is
                // safe again for the next subscription.
                try noteSubscriberDisconnects()
                if subscriptionGate.unsafe { try handleSubscriptions() }
            }
            // Requests before connection events: a connection's last requests are queued before its DISCONNECTED,
            // so a bye sent just before closing still counts as a bye.
            if ready.requests { try handleRequests() }
            if hasDeferredWork { handleDeferredWork() }
            if ready.connectionEvents { try handleConnectionEvents() }
            if ready.subscriptions { try handleSubscriptions() }
            fireDeadlines(now: clock.now())
            trimIfDue(now: clock.now(), busy: ready.requests || hasDeferredWork)
            if machine.core.recordsSessionEvents {
                machine.noteSessionEvents(now: clock.now())
                carryOutEffects()
            }
            loopBeat.beat()
            if loopBeat.now >= nextGaugeUpdate {
                metrics.update(
                    core: machine.core, published: machine.published, connections: connections.count,
                    subscriptions: subscribedTopics.count)
                nextGaugeUpdate = loopBeat.now + 1_000
            }
            metrics.loopIteration.record(duration: ContinuousClock.now - started)
        }
    }

    /// The earliest of the core's next deadline, the broker heartbeat and the next store write, on the broker's
    /// clock. (Coalesced replays wait on the monotonic clock: ``pollTimeout()``.)
    var nextDeadline: BrokerTime {
        schedule.nextDeadline(with: machine.nextDeadline)
    }

    /// The longest wait for sockets: the loop finishes a round at least this often, so that health checks and
    /// the gauges see it turn.
    static let longestWait: Int64 = 1_000

    /// How long to wait for sockets: until the next deadline, at most ``longestWait``. A manual clock (test mode)
    /// does not move while the loop waits, so there only a due deadline shortens the wait.
    private func pollTimeout() -> Int {
        // Queued expensive requests continue at once, after a look at the sockets.
        if hasDeferredWork { return 0 }
        // XPUB never signals room to send: while updates wait for a full subscriber, retry every millisecond.
        if !pending.isEmpty { return 1 }
        let wait = max(0, nextDeadline - clock.now())
        var timeout = clock.isManual && wait > 0 ? Self.longestWait : min(wait, Self.longestWait)
        if let due = replays.nextDue { timeout = min(timeout, max(0, due - loopBeat.now)) }
        return Int(timeout)
    }

    /// Does everything due by `now`: ends expired sessions, flushes group batches, sends the broker heartbeat, and
    /// hands changes to the store once per write interval.
    func fireDeadlines(now: BrokerTime) {
        if !pending.isEmpty { flushPublications(now: now) }
        machine.tick(now: now)
        carryOutEffects()
        publishDueReplays()
        if schedule.heartbeatDue(now: now) { enqueue(Topic.broker.bytes, .heartbeat) }
        if let writer, writer.takeSnapshotRequest() {
            // The database file was made anew: it gets the whole state, and the next batches build on it.
            writer.enqueue(everything(now: now))
        }
        // Changes go to the store once per write interval, in one batch, without waiting for it.
        if let writer, schedule.writeDue(now: now, hasChanges: machine.core.hasChanges) {
            writer.enqueue(batch(now: now).appendingLog(takeTransitions()))
        }
        // Transitions go to the log every round: they are what a crash must not lose (docs/history.md).
        if history != nil { writeTransitions(now: now) }
    }

    /// Gives freed memory back to the system once connections closed (Allocator.swift), when the schedule says.
    func trimIfDue(now: BrokerTime, busy: Bool) {
        guard schedule.trimDue(now: now, busy: busy) else { return }
        Allocator.giveBackFreeMemory()
        logger.debug("freed memory given back", metadata: ["ms": "\(clock.now() - now)"])
    }

    /// Test mode: moves the manual clock to `target`, stopping at each of the core's deadlines on the way so that
    /// expiries and group flushes happen at their own times and in order, as on the real clock. The broker heartbeat
    /// goes out at most once per stop (a year's advance is not 31 million heartbeats).
    func advance(to target: BrokerTime) {
        while let due = machine.core.nextDeadline, due <= target {
            clock.move(to: due)
            fireDeadlines(now: clock.now())
        }
        clock.move(to: target)
        fireDeadlines(now: target)
    }

    /// Sends a record to its user's topic.
    func publish(_ record: PresenceRecord) {
        if machine.restricts(record.user) {
            publishRestricted(record, replay: false)
        } else {
            send(Topic.presence(record.user), Codec.encodeRecord(record))
        }
        recentRecords.append(record)
        if recentRecords.count > Self.recentLimit { recentRecords.removeFirst() }
    }

    /// The broker's state at a glance.
    func status() -> BrokerStatus {
        BrokerStatus(
            broker: configuration.brokerID, epoch: epoch, time: clock.now(), sessions: machine.core.sessionCount,
            usersAvailable: machine.published.availableUserCount, connections: connections.count,
            groups: machine.published.groupCount, subscriptions: subscribedTopics.count, published: publishedCount,
            recent: Array(recentRecords))
    }

    /// The changes since the last batch, for the store.
    func batch(now: BrokerTime) -> StoreBatch {
        let changes = machine.core.takeChanges(now: now)
        return StoreBatch(
            records: changes.records,
            groups: changes.groups,
            deletedGroups: changes.deletedGroups, brokerTime: now, privacy: machine.core.takePrivacyChanges())
    }

    /// The whole state as one batch, for a store that starts empty.
    func everything(now: BrokerTime) -> StoreBatch {
        let all = machine.core.everything(now: now)
        return StoreBatch(
            records: all.records, groups: all.groups, deletedGroups: [], brokerTime: now,
            privacy: machine.core.allPrivacySettings())
    }

    /// Sends a group message, split into parts of at most ``BrokerConfiguration/maxGroupMessageBytes`` when its
    /// changes do not fit in one; each later part takes a new group seq (docs/groups.md).
    func publish(_ update: GroupUpdate, recordCache: inout [UserID: [UInt8]], now: BrokerTime) {
        let topic = Topic.group(update.group)
        let parts = Codec.splitGroupUpdate(
            update, recordCache: &recordCache, maxBytes: BrokerConfiguration.maxGroupMessageBytes)
        for (index, var part) in parts.enumerated() {
            // A later part takes a new, larger seq, so that the group seq rule applies every part.
            if index > 0 {
                part.seq = machine.issueGroupSeq(update.group, now: now)
            }
            let body = Codec.encodeGroupUpdate(part, recordCache: &recordCache)
            if machine.hasBlocks {
                // The WebSocket subscribers get their own views (EventLoop+Privacy.swift).
                enqueue(topic.bytes, .bytes(body), toGateway: false)
                deliverGroupViews(part, body: body, now: now)
            } else {
                send(topic, body)
            }
        }
    }
}
