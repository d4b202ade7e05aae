import Foundation
import Logging
import RollCallCluster
import RollCallCore
import RollCallSecurity
import RollCallStore
import RollCallWire
import ServiceLifecycle
import Synchronization
import ZeroMQ

/// The RollCall broker as a service: binding happens in `init`, so a bad endpoint fails at start-up with a clear
/// error; ``run()`` runs the event loop on its own thread until graceful shutdown or cancellation.
public final class Broker: Service, Sendable {
    /// The endpoints actually bound (a `*` port resolved).
    public let commandEndpoint: String
    public let updateEndpoint: String
    /// Changes at every start.
    public let epoch: String
    /// The broker's CURVE public key (40 Z85 characters), which clients need; `nil` without CURVE.
    public let publicKey: String?
    private let authorizedKeysPath: String?
    private let authorizedKeyCount: Int?
    /// `--contacts-file`, read again on SIGHUP; one reload at a time, so that the loop takes them in order.
    private let contactsFile: String?
    private let contactsReload = Mutex<Void>(())
    /// The cluster node, on a node of a cluster: its state is readable from any thread.
    private let clusterNode: ClusterNode?

    /// The test-mode clock's moves; `nil` on the real clock.
    let testClock: TestClockSignal?
    private let loop: Mutex<EventLoop?>
    private let context: Context
    private let waker: Waker
    let mailbox: LoopMailbox
    let configuration: BrokerConfiguration
    private let loopHeartbeat = LoopHeartbeat()
    private let stopping = Atomic<Bool>(false)
    private let looping = Atomic<Bool>(false)
    private let logger: Logger
    /// The presence log's reader, when the broker keeps a log (a data directory and a retention above 0): webhook
    /// delivery reads it on its own connection, never through the loop.
    public let presenceLog: PresenceLog?

    /// `logCommitted` is told the highest offset after each write that appended to the log, on the store writer's
    /// thread (webhook delivery wakes on it): it must only hand it on.
    public init(
        configuration: BrokerConfiguration, logger: Logger,
        logCommitted: @escaping @Sendable (UInt64) -> Void = { _ in }
    ) throws {
        try configuration.validate()
        let context = try Context()
        // The ZAP handler is bound before any CURVE socket: a CURVE server without one accepts every client key
        // (libzmq#2711). One handler per context, and this context is the broker's own.
        var zap: Socket?
        if let curve = configuration.curve {
            guard Curve.isAvailable else { throw BrokerError.curveUnavailable }
            let handler = try Socket(context, .rep)
            try handler.set(.linger(milliseconds: 0))
            try handler.bind("inproc://zeromq.zap.01")
            zap = handler
            publicKey = try Curve.publicKey(ofSecret: curve.secretKey)
        } else {
            publicKey = nil
        }
        let router = try Socket(context, .router)
        try router.set(.linger(milliseconds: 0))
        // libzmq's default, stated: a new connection never takes over another's routing id, so the replies (and
        // sessions) of one connection can never be diverted to another that claims its id.
        try router.set(.routerHandover(false))
        try router.set(.maxMessageSize(bytes: configuration.hardFrameLimit))
        // A deep accept queue: after a restart every client reconnects at once, and with libzmq's default of 100
        // pending connections the kernel drops SYNs and clients wait a second or more to retry.
        try router.set(.backlog(4_096))
        // Unread replies queue up to this many messages per connection; replies are at most maxReplyBytes, so a
        // connection that never reads holds at most their product (docs/reliability.md).
        try router.set(.sendHighWaterMark(configuration.commandHighWaterMark))
        try Self.setConnectionHeartbeats(router, configuration)
        let xpub = try Socket(context, .xpub)
        try xpub.set(.linger(milliseconds: 0))
        try xpub.set(.xpubVerbose(true))
        try xpub.set(.sendHighWaterMark(configuration.updateHighWaterMark))
        // A full subscriber makes a send fail instead of missing the message: the loop paces what it publishes
        // (Shell/UpdateEndpoint.swift).
        try xpub.set(.xpubNoDrop(true))
        // ZMTP heartbeats close a subscriber connection that answers no PING for 30 s (a frozen process, a dead
        // host): it stops holding updates back, and its queue is freed. A reading subscriber's libzmq answers them.
        try xpub.set(.heartbeatInterval(milliseconds: 10_000))
        try xpub.set(.heartbeatTimeout(milliseconds: 30_000))
        // Subscribers send nothing but subscriptions, and none longer than a topic is of use: libzmq drops a peer
        // that sends a longer frame before it stores anything of it.
        // With CURVE the limit also applies to the handshake's commands, and INITIATE is larger than any topic.
        try xpub.set(
            .maxMessageSize(
                bytes: configuration.curve == nil
                    ? BrokerConfiguration.maxSubscriptionBytes : BrokerConfiguration.maxCurveSubscriptionBytes))
        try xpub.set(.backlog(4_096))
        try Self.setConnectionHeartbeats(xpub, configuration)
        if let curve = configuration.curve {
            for socket in [router, xpub] {
                try socket.set(.zapDomain("rollcall"))
                try socket.set(.curveServer(true))
                try socket.set(.curveSecretKey(curve.secretKey))
                // A peer without a key can still open connections; each is closed if its handshake has not
                // finished within 5 s (libzmq's default is 30 s), so that such peers hold the connection limit
                // for less long.
                try socket.set(.handshakeInterval(milliseconds: BrokerConfiguration.curveHandshakeMilliseconds))
            }
            // Subscriptions are authorized one by one: the loop applies only those the key may make
            // (Shell/UpdateEndpoint.swift).
            try xpub.set(.xpubManual(true))
        }
        // Connection events tell the loop when a client's TCP connection closes (docs/liveness.md). The monitor
        // starts before the bind, so that it sees every connection.
        epoch = Token.random(bits: 64)
        let monitor = try router.monitor([.accepted, .disconnected], name: "router-\(epoch)", context: context)
        // With CURVE, the XPUB's disconnects too: a subscriber that leaves while its subscriptions wait to be read
        // makes applying them unsafe in libzmq 4.3.4 (ManualSubscriptionGate.swift); and its accepted connections,
        // which a revocation may close (EventLoop+Doors.swift).
        let xpubMonitor =
            configuration.curve == nil
            ? nil
            : try xpub.monitor(
                [.accepted, .handshakeSucceeded, .disconnected], name: "xpub-\(epoch)", context: context)
        do {
            try router.bind(configuration.commandEndpoint)
        } catch {
            throw BrokerError.cannotBind(endpoint: configuration.commandEndpoint, reason: "\(error)")
        }
        do {
            try xpub.bind(configuration.updateEndpoint)
        } catch {
            throw BrokerError.cannotBind(endpoint: configuration.updateEndpoint, reason: "\(error)")
        }
        commandEndpoint = try router.lastEndpoint()
        updateEndpoint = try xpub.lastEndpoint()
        let (waker, wakeSocket) = try Waker.make(context: context, name: epoch)
        self.waker = waker
        let mailbox = LoopMailbox(waker: waker)
        self.mailbox = mailbox
        self.configuration = configuration
        self.context = context
        self.logger = logger
        let store: (any PresenceStore)?
        switch configuration.storage {
        case .none: store = nil
        case .directory(let path): store = try SQLiteStore(directory: path, checkpointsApart: true)
        case .store(let given): store = given
        }
        // What a node says of itself in etcd, for operators: where its clients reach it.
        var cluster: ClusterLink?
        if let settings = configuration.cluster {
            let description = ClusterValues.describe(
                command: commandEndpoint, update: updateEndpoint, broker: configuration.brokerID, epoch: epoch)
            cluster = ClusterLink(settings: settings, description: description, mailbox: mailbox)
        }
        clusterNode = cluster?.node
        // Parsed here, before the loop exists: a file that cannot be used stops the start, naming file and line.
        var contacts: (path: String, lists: [ContactList])?
        if let path = configuration.contactsFile {
            let started = ContinuousClock.now
            switch ContactsFile.load(path: path, maxContacts: configuration.presence.maxContacts) {
            case .success(let lists):
                contacts = (path, lists)
                logger.info(
                    "contacts file read",
                    metadata: [
                        "file": "\(path)", "users": "\(lists.count)",
                        "contacts": "\(lists.reduce(0) { $0 + $1.contacts.count })",
                        "ms": "\((ContinuousClock.now - started).wholeMilliseconds)",
                    ])
            case .failure(let error): throw BrokerError.contactsFile(error)
            }
        }
        contactsFile = configuration.contactsFile
        let start = try LoopStart.load(
            configuration: configuration, epoch: epoch, store: store, inCluster: cluster?.settings, contacts: contacts,
            logger: logger, mailbox: mailbox, logCommitted: logCommitted)
        let eventLoop = EventLoop(
            start: start,
            sockets: LoopSockets(
                router: router, xpub: xpub, wake: wakeSocket, monitor: monitor, zap: zap, xpubMonitor: xpubMonitor),
            logger: logger, mailbox: mailbox, heartbeat: loopHeartbeat, cluster: cluster)
        presenceLog = eventLoop.store?.history?.log
        if eventLoop.clock.isManual {
            let signal = TestClockSignal(time: eventLoop.clock.now())
            eventLoop.clock.signal = signal
            testClock = signal
        } else {
            testClock = nil
        }
        authorizedKeysPath = configuration.curve?.authorizedKeysPath
        authorizedKeyCount = configuration.curve?.authorizedKeys.roles.count
        self.loop = Mutex(eventLoop)
    }

    /// ZMTP heartbeats: libzmq's I/O thread PINGs every connection and closes one that stays silent, so a peer
    /// whose network vanished without a FIN does not keep its connection (and the pipes behind it) for hours.
    private static func setConnectionHeartbeats(_ socket: Socket, _ configuration: BrokerConfiguration) throws {
        guard configuration.connectionHeartbeatMilliseconds > 0 else { return }
        try socket.set(.heartbeatInterval(milliseconds: configuration.connectionHeartbeatMilliseconds))
        try socket.set(.heartbeatTimeout(milliseconds: configuration.connectionHeartbeatTimeoutMilliseconds))
        try socket.set(.heartbeatTTL(milliseconds: configuration.connectionHeartbeatTTLMilliseconds))
    }

    /// Runs the event loop until graceful shutdown (SIGTERM, SIGINT) or cancellation, then closes the sockets.
    public func run() async throws {
        guard let loop = loop.withLock({ $0.take() }) else { throw BrokerError.alreadyRan }
        let handOff = HandOff(loop)
        logger.info(
            "broker started",
            metadata: [
                "command": "\(commandEndpoint)", "update": "\(updateEndpoint)", "epoch": "\(epoch)",
                "mechanism": "\(publicKey == nil ? "NULL" : "CURVE")", "public_key": "\(publicKey ?? "-")",
                "authorized_keys": "\(authorizedKeyCount.map(String.init) ?? "-")",
            ])
        defer {
            waker.close()
            context.terminate()  // every socket is closed: this returns once the ports are free again
        }
        try await withGracefulShutdownHandler {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                    let thread = Thread {
                        let loop = handOff.take()
                        self.looping.store(true, ordering: .sequentiallyConsistent)
                        continuation.resume(with: Result { try loop.run(stopping: self.stopping) })
                    }
                    thread.name = "rollcall-loop"
                    thread.start()
                }
            } onCancel: {
                self.stop()
            }
        } onGracefulShutdown: {
            self.stop()
        }
        logger.info("broker stopped")
    }

    /// A signal the operator sent that is not a request to stop.
    public enum Signal: Sendable, Equatable {
        /// SIGHUP: the conventional "reload". With CURVE it reloads the authorized-keys file, with `--contacts-file`
        /// the contacts file; every other setting is read at start.
        case hangup
        /// SIGUSR1, SIGUSR2, SIGALRM: no meaning; noted so that nobody wonders whether it was seen.
        case other(String)
    }

    /// Notes a signal that must neither stop the broker nor lose anything. Safe from any thread.
    public func received(_ signal: Signal) {
        switch signal {
        case .hangup:
            guard authorizedKeysPath != nil || contactsFile != nil else {
                logger.notice("SIGHUP received: nothing to reload (settings are read at start); still running")
                return
            }
            if authorizedKeysPath != nil { _ = reloadAuthorizedKeys() }
            if contactsFile != nil { _ = reloadContacts() }
        case .other(let name):
            logger.notice("signal received and ignored; still running", metadata: ["signal": "\(name)"])
        }
    }

    /// Reads the authorized-keys file again and hands the new table to the loop: connections and handshakes from
    /// then on are authorized against it. A file that cannot be read or parsed changes nothing (the error, with
    /// the line at fault, is logged and returned). Safe from any thread.
    @discardableResult
    public func reloadAuthorizedKeys() -> Result<AuthorizedKeys, AuthorizedKeysError> {
        guard let path = authorizedKeysPath else { return .failure(AuthorizedKeysError(path: "", reason: "no file")) }
        switch AuthorizedKeys.load(path: path) {
        case .success(let keys):
            mailbox.post { loop in loop.replace(authorizedKeys: keys) }
            if keys.roles.isEmpty {
                logger.warning(
                    "SIGHUP: the authorized-keys file lists no key: nobody can connect", metadata: ["file": "\(path)"])
            }
            logger.notice(
                "SIGHUP: authorized keys reloaded", metadata: ["file": "\(path)", "keys": "\(keys.roles.count)"])
            return .success(keys)
        case .failure(let error):
            logger.error(
                "SIGHUP: authorized keys NOT reloaded; the previous table stays", metadata: ["error": "\(error)"])
            return .failure(error)
        }
    }

    /// Reads the contacts file again on the calling thread (never the loop's) and hands the lists to the loop in one
    /// message, which applies them as op `contacts` with `set` would (BrokerMachine+Privacy.swift) and logs
    /// "SIGHUP: contacts file reloaded". A file that cannot be read or parsed changes nothing: the error, with file
    /// and line, is logged and returned. Safe from any thread; reloads run one at a time, in order.
    @discardableResult
    public func reloadContacts() -> Result<Int, ContactsFileError> {
        guard let path = contactsFile else {
            return .failure(ContactsFileError(path: "", line: nil, reason: "no --contacts-file"))
        }
        return contactsReload.withLock { _ in
            switch ContactsFile.load(path: path, maxContacts: configuration.presence.maxContacts) {
            case .success(let lists):
                mailbox.post { [logger] loop in
                    let started = ContinuousClock.now
                    switch loop.machine.loadContacts(lists, now: loop.clock.now()) {
                    case .success(let changed):
                        loop.carryOutEffects()  // each WebSocket subscriber whose view changed gets its new view
                        logger.notice(
                            "SIGHUP: contacts file reloaded",
                            metadata: [
                                "file": "\(path)", "users": "\(lists.count)", "changed": "\(changed)",
                                "ms": "\((ContinuousClock.now - started).wholeMilliseconds)",
                            ])
                    case .failure(let refusal):
                        logger.error(
                            "SIGHUP: contacts file NOT reloaded; the previous contacts stay",
                            metadata: ["file": "\(path)", "error": "\(refusal.message)"])
                    }
                }
                return .success(lists.count)
            case .failure(let error):
                logger.error(
                    "SIGHUP: contacts file NOT reloaded; the previous contacts stay",
                    metadata: ["error": "\(error)"])
                return .failure(error)
            }
        }
    }

    /// The node's incarnation (its name and its lease now) while it may serve, on a node of a cluster; `nil` outside
    /// its window, before it joined, and on a single broker. Safe from any thread.
    public var servingIncarnation: ClusterKeys.Incarnation? {
        guard let clusterNode, clusterNode.acceptsSessions else { return nil }
        return clusterNode.incarnation
    }

    /// The node's name and standing, on a node of a cluster (`nil` on a single broker). Safe from any thread.
    public var cluster: ClusterStanding? {
        guard let clusterNode else { return nil }
        return ClusterStanding(
            node: clusterNode.configuration.nodeID,
            state: .init(clusterNode.state, acceptsSessions: clusterNode.acceptsSessions))
    }

    /// Whether the event loop's thread has started (it serves requests from then on).
    public var isRunning: Bool { looping.load(ordering: .sequentiallyConsistent) }

    /// Whether shutdown has begun: the broker no longer takes new work.
    public var isStopping: Bool { stopping.load(ordering: .sequentiallyConsistent) }

    /// Milliseconds since the event loop last finished a round (it does at least once a second while healthy);
    /// `nil` before its first round.
    public var millisecondsSinceLastRound: Int64? { loopHeartbeat.sinceLastRound }

    /// The broker's state at a glance, read by the loop on its next round; `nil` if the loop does not answer
    /// within `timeout` (stalled, or stopped).
    public func status(timeout: Duration = .seconds(2)) async -> BrokerStatus? {
        await ask(timeout: timeout) { loop in
            BrokerStatus(machine: loop.machine, commands: loop.commands, updates: loop.updates, now: loop.clock.now())
        }
    }

    /// A user's record and groups, read by the loop; `nil` if the loop does not answer within `timeout`.
    public func lookUp(_ user: UserID, timeout: Duration = .seconds(2)) async -> UserView? {
        await ask(timeout: timeout) { loop in
            let now = loop.clock.now()
            // The operator's view: the truth about an invisible user (docs/security.md).
            return UserView(
                record: loop.machine.published.trueRecord(of: user, now: now),
                groups: loop.machine.published.groups(of: user))
        }
    }

    /// Runs `read` on the loop's thread and returns its answer, or `nil` after `timeout`.
    private func ask<T: Sendable>(timeout: Duration, _ read: @escaping @Sendable (EventLoop) -> T) async -> T? {
        let answer = OneAnswer<T>()
        return await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
            answer.wait(continuation)
            mailbox.post { loop in answer.give(read(loop)) }
            Task {
                try? await Task.sleep(for: timeout)
                answer.give(nil)
            }
        }
    }

    /// Asks the loop to finish its current batch and stop. Safe from any thread.
    public func stop() {
        stopping.store(true, ordering: .sequentiallyConsistent)
        waker.wake()
    }
}

/// Why a broker could not start or run.
public enum BrokerError: Error, CustomStringConvertible {
    case cannotBind(endpoint: String, reason: String)
    case alreadyRan
    /// The store failed to keep the last changes at shutdown; the log says why.
    case finalWriteFailed
    /// CURVE was asked for and this libzmq was built without it.
    case curveUnavailable
    /// `--contacts-file` cannot be used (unreadable, or a line at fault).
    case contactsFile(ContactsFileError)

    public var description: String {
        switch self {
        case .cannotBind(let endpoint, let reason): "cannot bind \(endpoint): \(reason)"
        case .alreadyRan: "a broker runs only once"
        case .finalWriteFailed: "the last changes could not be written to the store (see the log)"
        case .curveUnavailable: "CURVE is configured but this libzmq was built without it (zmq_has(\"curve\") is 0)"
        case .contactsFile(let error): "--contacts-file \(error)"
        }
    }
}

/// A continuation resumed once, by whichever comes first: the loop's answer or the timeout.
final class OneAnswer<T: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<T?, Never>?>(nil)

    func wait(_ continuation: CheckedContinuation<T?, Never>) { self.continuation.withLock { $0 = continuation } }

    func give(_ value: T?) { continuation.withLock { $0.take()?.resume(returning: value) } }
}
