import DequeModule
import Logging
import RollCallCore
import RollCallStore
import RollCallWire
import Synchronization
import ZeroMQ

/// The one thread that owns the broker's sockets: it polls them with the core's next deadline as the timeout,
/// feeds what arrives to the core, and sends what the core returns. It never waits for a client or subscriber:
/// replies and updates are sent without blocking, and libzmq drops them for peers that are over their high-water
/// mark.
final class EventLoop {
    let configuration: BrokerConfiguration
    let epoch: String
    let router: Socket
    let xpub: Socket
    let wake: Socket
    let monitor: Socket
    let logger: Logger
    let clock: BrokerClock
    var core: PresenceCore
    let writer: StoreWriter?
    /// The connection behind each open file descriptor of the ROUTER (see EventLoop+Connections.swift).
    var connectionsByDescriptor: [Int32: TrackedConnection] = [:]
    var connectionCount: UInt64 = 0
    var closedRoutingIDs: Set<[UInt8]> = []
    var closedRoutingIDOrder: Deque<[UInt8]> = []
    /// When to give freed memory back to the system, after connections closed (see Allocator.swift).
    var trimAt: BrokerTime?
    /// The latest a trim waits for a quiet round.
    var trimLatest: BrokerTime?
    /// Expensive requests waiting for their turn, per routing id, and the order of the turns
    /// (EventLoop+Fairness.swift).
    var deferred: [[UInt8]: Deque<DeferredWork>] = [:]
    var deferredOrder: Deque<[UInt8]> = []
    var deferredBytes = 0

    /// The most requests handled before the loop looks at subscriptions and deadlines again.
    static let batch = 512

    init(
        configuration: BrokerConfiguration, epoch: String, router: Socket, xpub: Socket, wake: Socket,
        monitor: Socket, store: (any PresenceStore)?, logger: Logger
    ) throws {
        self.configuration = configuration
        self.epoch = epoch
        self.router = router
        self.xpub = xpub
        self.wake = wake
        self.monitor = monitor
        self.logger = logger
        var core = PresenceCore(configuration: configuration.presence)
        if let store {
            let kept = try store.load()
            clock = BrokerClock(floor: kept.brokerTime)
            core.restore(records: kept.records, groups: kept.groups, now: clock.now())
            logger.info(
                "state restored",
                metadata: [
                    "users": "\(kept.records.count)", "available": "\(core.availableUserCount)",
                    "groups": "\(kept.groups.count)", "skipped": "\(kept.skippedRows)",
                ])
            writer = StoreWriter(store: store, logger: logger)
        } else {
            clock = BrokerClock()
            writer = nil
            core.tracksChanges = false  // nothing will take them
        }
        self.core = core
    }

    func run(stopping: borrowing Atomic<Bool>) throws {
        defer {
            if let writer {
                // Shutdown loses nothing, also when the loop fails: the last changes are written first.
                writer.enqueue(batch(now: clock.now()))
                writer.finish()
            }
            router.close()
            xpub.close()
            wake.close()
            monitor.close()
        }
        var poller = Poller([router, xpub, wake, monitor])
        var nextHeartbeat = clock.now()
        var nextWrite: BrokerTime?
        while !stopping.load(ordering: .sequentiallyConsistent) {
            var deadline = min(core.nextDeadline ?? nextHeartbeat, nextHeartbeat)
            if let nextWrite { deadline = min(deadline, nextWrite) }
            if let trimAt { deadline = min(deadline, trimAt) }
            let timeout = hasDeferredWork ? 0 : Int(max(0, deadline - clock.now()))
            let ready = try poller.poll(timeout: timeout)
            if ready[2] { try wake.drain() }
            // Requests before connection events: a connection's last requests are queued before its DISCONNECTED,
            // so a bye sent just before closing still counts as a bye.
            if ready[0] { try handleRequests() }
            if hasDeferredWork { handleDeferredWork() }
            if ready[3] { try handleConnectionEvents() }
            if ready[1] { try handleSubscriptions() }
            let now = clock.now()
            publish(core.tick(now: now))
            var recordCache: [UserID: [UInt8]] = [:]  // one flush's records are the same in every group
            for update in core.flushGroups(now: now) {
                send(Topic.group(update.group), Codec.encodeGroupUpdate(update, recordCache: &recordCache))
            }
            if let due = trimAt, now >= due {
                if (ready[0] || hasDeferredWork) && now < (trimLatest ?? now) {
                    // Still busy, maybe with the closed connections' last requests, whose replies it frees: wait
                    // until a quiet round, for at most trimPostponeMilliseconds.
                    trimLatest = trimLatest ?? now + Self.trimPostponeMilliseconds
                    trimAt = now + 100
                } else {
                    (trimAt, trimLatest) = (nil, nil)
                    Allocator.giveBackFreeMemory()
                    logger.debug("freed memory given back", metadata: ["ms": "\(clock.now() - now)"])
                }
            }
            if now >= nextHeartbeat {
                publishHeartbeat(now: now)
                nextHeartbeat = now + configuration.brokerHeartbeatMilliseconds
            }
            if let writer, core.hasChanges {
                // Changes go to the store once per write interval, in one batch, without waiting for it.
                if let due = nextWrite, now >= due {
                    writer.enqueue(batch(now: now))
                    nextWrite = nil
                } else if nextWrite == nil {
                    nextWrite = now + configuration.writeIntervalMilliseconds
                }
            }
        }

        logger.info("event loop stopping", metadata: ["sessions": "\(core.sessionCount)"])
    }

    /// Sends records to their users' topics.
    func publish(_ records: [PresenceRecord]) {
        for record in records { send(Topic.presence(record.user), Codec.encodeRecord(record)) }
    }

    /// The changes since the last batch, for the store.
    func batch(now: BrokerTime) -> StoreBatch {
        let changes = core.takeChanges(now: now)
        return StoreBatch(
            records: changes.records,
            groups: changes.groups,
            deletedGroups: changes.deletedGroups, brokerTime: now)
    }

    /// Publishes the broker's heartbeat on `broker/`.
    func publishHeartbeat(now: BrokerTime) {
        let heartbeat = BrokerHeartbeat(
            broker: configuration.brokerID, epoch: epoch, time: now,
            intervalMilliseconds: configuration.brokerHeartbeatMilliseconds,
            usersAvailable: core.availableUserCount, sessions: core.sessionCount)
        send(.broker, Codec.encodeBrokerHeartbeat(heartbeat))
    }

    /// Sends a group message to the group's topic.
    func publish(_ update: GroupUpdate) {
        send(Topic.group(update.group), Codec.encodeGroupUpdate(update))
    }

    func send(_ topic: Topic, _ body: [UInt8]) {
        do {
            // XPUB never blocks: a subscriber over its high-water mark misses the message, the loop goes on.
            if try xpub.send(topic.bytes, more: true) { try xpub.send(body) }
        } catch {
            logger.error("publishing failed", metadata: ["topic": "\(topic.text)", "error": "\(error)"])
        }
    }
}
