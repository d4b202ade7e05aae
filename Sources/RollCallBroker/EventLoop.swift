import Logging
import RollCallCore
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
    let clock = BrokerClock()
    var core: PresenceCore
    /// The connection behind each open file descriptor of the ROUTER (see EventLoop+Connections.swift).
    var connectionsByDescriptor: [Int32: TrackedConnection] = [:]
    var connectionCount: UInt64 = 0

    /// The most requests handled before the loop looks at subscriptions and deadlines again.
    static let batch = 512

    init(
        configuration: BrokerConfiguration, epoch: String, router: Socket, xpub: Socket, wake: Socket,
        monitor: Socket, logger: Logger
    ) {
        self.configuration = configuration
        self.epoch = epoch
        self.router = router
        self.xpub = xpub
        self.wake = wake
        self.monitor = monitor
        self.logger = logger
        self.core = PresenceCore(configuration: configuration.presence)
    }

    func run(stopping: borrowing Atomic<Bool>) throws {
        defer {
            router.close()
            xpub.close()
            wake.close()
            monitor.close()
        }
        var poller = Poller([router, xpub, wake, monitor])
        var nextHeartbeat = clock.now()
        while !stopping.load(ordering: .sequentiallyConsistent) {
            let deadline = core.nextDeadline.map { min($0, nextHeartbeat) } ?? nextHeartbeat
            let timeout = Int(max(0, deadline - clock.now()))
            let ready = try poller.poll(timeout: timeout)
            if ready[2] { try wake.drain() }
            if ready[3] { try handleConnectionEvents() }
            if ready[0] { try handleRequests() }
            if ready[1] { try handleSubscriptions() }
            let now = clock.now()
            publish(core.tick(now: now))
            var recordCache: [UserID: [UInt8]] = [:]  // one flush's records are the same in every group
            for update in core.flushGroups(now: now) {
                send(Topic.group(update.group), Codec.encodeGroupUpdate(update, recordCache: &recordCache))
            }
            if now >= nextHeartbeat {
                publishHeartbeat(now: now)
                nextHeartbeat = now + configuration.brokerHeartbeatMilliseconds
            }
        }
        logger.info("event loop stopping", metadata: ["sessions": "\(core.sessionCount)"])
    }

    /// Sends records to their users' topics.
    func publish(_ records: [PresenceRecord]) {
        for record in records { send(Topic.presence(record.user), Codec.encodeRecord(record)) }
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
