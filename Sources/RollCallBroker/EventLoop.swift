import Logging
import RollCallCore
import RollCallWire
import Synchronization
import ZeroMQ

/// The one thread that owns the broker's sockets, a shell around the broker's decisions: it polls the sockets until
/// the next deadline, hands what arrives to ``BrokerMachine``, and carries out the machine's effects; it never waits
/// for a peer. Each endpoint keeps its own state and I/O in a part under Shell/ (docs/architecture.md).
final class EventLoop {
    var telemetry: LoopTelemetry
    var clock: BrokerClock
    /// The broker's decisions (Machine/BrokerMachine.swift), and its effects being carried out.
    var machine: BrokerMachine
    var effects = EffectRun()
    /// The heartbeat, store and trim timers (Machine/LoopSchedule.swift).
    var schedule: LoopSchedule
    let signals: LoopSignals
    let commands: CommandEndpoint
    let updates: UpdateEndpoint
    let webSockets: WebSocketSide
    /// The store and the presence log, unless the broker is ephemeral.
    let store: StoreSide?
    /// Expensive requests waiting for their turn, per connection, from either door.
    let requests = RequestQueue()
    /// A cluster node's link: started and stopped with the loop; it reports each round and takes the machine's writes.
    let cluster: ClusterLink?
    /// Replies that wait for etcd (a privacy edit on a node of a cluster, ``BrokerMachine/Answer/afterEtcd(ticket:)``),
    /// by ticket; their connections are held in ``requests`` until they go.
    var awaitedReplies: [UInt64: AwaitedReply] = [:]

    /// Where a reply that waits for etcd goes, and the request it answers (for `rollcall_requests_total`).
    struct AwaitedReply {
        let id: JSON?
        let route: ReplyRoute
        let request: Request
    }

    /// The most requests handled before the loop looks at subscriptions and deadlines again.
    static let batch = 512
    /// The longest wait for sockets: a round at least this often, so that health checks and the gauges see it turn.
    static let longestWait: Int64 = 1_000

    var configuration: BrokerConfiguration { machine.configuration }
    var logger: Logger { telemetry.logger }
    var metrics: BrokerMetrics { telemetry.metrics }

    /// A loop over `sockets` from `start`, the state loaded from the store (LoopStart.swift).
    init(
        start: LoopStart, sockets: LoopSockets, logger: Logger, mailbox: LoopMailbox, heartbeat: LoopHeartbeat,
        cluster: ClusterLink?
    ) {
        let configuration = start.machine.configuration
        (machine, clock, schedule, store) = (start.machine, start.clock, start.schedule, start.store)
        self.cluster = cluster
        telemetry = LoopTelemetry(logger: logger, metrics: BrokerMetrics())
        signals = LoopSignals(sockets: sockets, mailbox: mailbox, beat: heartbeat)
        commands = CommandEndpoint(
            router: sockets.router, monitor: sockets.monitor, zap: sockets.zap, configuration: configuration,
            logger: logger, metrics: telemetry.metrics)
        updates = UpdateEndpoint(
            xpub: sockets.xpub, monitor: sockets.xpubMonitor, configuration: configuration, logger: logger,
            metrics: telemetry.metrics)
        webSockets = WebSocketSide(logger: logger, metrics: telemetry.metrics)
    }

    /// Turns until `stopping` is set, then writes the last changes and closes the sockets. Throws if the loop failed,
    /// or if the last changes could not be written (so that a supervisor sees the failure).
    func run(stopping: borrowing Atomic<Bool>) throws {
        cluster?.node.start()
        defer {
            // Replies still waiting for etcd are not left to the clients' timeouts.
            for ticket in awaitedReplies.keys.sorted() {
                answerAwaited(
                    ticket,
                    .failure(
                        PresenceError(
                            .clusterUnavailable,
                            "this node stopped before etcd confirmed the edit: it may still take effect; send it "
                                + "again to another node")))
            }
            // Revokes the node's lease: its sessions end everywhere at once (node_lost). A read in flight is dropped.
            cluster?.node.stop()
            store?.stopReading()
            signals.sockets.close()
        }
        do {
            try turn(until: stopping)
        } catch {
            _ = store?.finish(from: &machine, now: clock.now())  // shutdown loses nothing, also when it fails
            throw error
        }
        // The final write comes before the last log line: a log that cannot be written must not lose it.
        let written = store?.finish(from: &machine, now: clock.now()) ?? true
        releaseHeldPublications()  // in the log now, or never: they go out before the sockets close
        logger.info("event loop stopped", metadata: ["sessions": "\(machine.core.sessionCount)"])
        guard written else { throw BrokerError.finalWriteFailed }
    }

    private func turn(until stopping: borrowing Atomic<Bool>) throws {
        var poller = LoopSockets.ReadinessPoller(signals.sockets)
        while !stopping.load(ordering: .sequentiallyConsistent) {
            let ready = try poller.poll(timeout: pollTimeout())
            let started = ContinuousClock.now
            if ready.wake {
                try signals.sockets.wake.drain()
                for job in signals.mailbox.take() { job(self) }
            }
            cluster?.report(to: &machine, now: clock.now())
            carryOutEffects()
            for id in webSockets.takeDropping() { closeGatewayConnection(id) }
            // Handshakes first: a client waits for the answer before it can send anything.
            if ready.handshakes { try commands.answerHandshakes(batch: Self.batch, now: clock.now()) }
            // A subscriber left: what waits in the XPUB is read at once and refused, so that the gate is safe again.
            if ready.subscriberDisconnects, try updates.noteDisconnects() { try handleSubscriptions() }
            // Requests before connection events (queued before its DISCONNECTED): a bye just before a close is a bye.
            if ready.requests { try handleRequests() }
            if !requests.isEmpty { requests.takeTurns(takeTurn) { store?.park($0) } }
            if ready.connectionEvents { try handleConnectionEvents() }
            if ready.subscriptions { try handleSubscriptions() }
            fireDeadlines(now: clock.now())
            if schedule.trimDue(now: clock.now(), busy: ready.requests || !requests.isEmpty) {
                Allocator.giveBackFreeMemory()  // once connections closed (Allocator.swift)
            }
            if machine.core.recordsSessionEvents {
                machine.noteSessionEvents(now: clock.now())
                carryOutEffects()
            }
            if let store, machine.hold != nil {
                // Held publications go out once the writer has committed them; it wakes the loop after each commit
                // while they wait. What it committed before it could see that is taken now.
                store.wakeLoopAfterCommits(machine.hold?.isHolding == true)
                carryOutEffects()
                for key in store.readersCaughtUp(visible: machine.visibleLogOffset) { requests.release(key) }
            }
            signals.beat.beat()
            telemetry.roundEnded(started: started, monotonic: signals.beat.now) {
                $0.update(
                    core: machine.core, published: machine.published, connections: commands.connectionCount,
                    subscriptions: updates.topics.count)
            }
        }
    }

    /// How long to wait for sockets: until the next deadline (the machine's, the heartbeat's, the next store write's,
    /// on the broker's clock), at most ``longestWait``. A manual clock (test mode) does not move while the loop
    /// waits, so there only a due deadline shortens the wait. Coalesced replays, and publications' longest wait for the
    /// log, go by the monotonic clock.
    private func pollTimeout() -> Int {
        // Queued expensive requests continue at once, after a look at the sockets.
        if !requests.isEmpty { return 0 }
        // XPUB never signals room to send: while updates wait for a full subscriber, retry every millisecond.
        if updates.isPacing { return 1 }
        let wait = max(0, schedule.nextDeadline(with: machine.nextDeadline) - clock.now())
        var timeout = clock.isManual && wait > 0 ? Self.longestWait : min(wait, Self.longestWait)
        if let due = updates.nextReplayDue { timeout = min(timeout, max(0, due - signals.beat.now)) }
        if let due = machine.hold?.nextDeadline { timeout = min(timeout, max(0, due - signals.beat.now)) }
        return Int(timeout)
    }

    /// Does everything due by `now`: ends expired sessions, flushes group batches, sends the broker heartbeat and the
    /// due replays, and hands changes to the store.
    func fireDeadlines(now: BrokerTime) {
        if updates.isPacing { updates.flush(now: now, heartbeat: heartbeatBody) }
        machine.tick(now: now)
        carryOutEffects()
        for topic in updates.takeDueReplays(monotonic: signals.beat.now) { replay(topic) }
        if schedule.heartbeatDue(now: now) { publish(Topic.broker.bytes, .heartbeat) }
        store?.write(from: &machine, now: now) { schedule.writeDue(now: now, hasChanges: $0) }
    }

    /// Carries out every publication that waits for the presence log, whatever the log holds.
    func releaseHeldPublications() {
        guard var hold = machine.hold, hold.isHolding else { return }
        var held: [BrokerMachine.Effect] = []
        hold.releaseAll(into: &held)
        machine.hold = nil
        machine.effects = held + machine.effects
        carryOutEffects()
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
}
