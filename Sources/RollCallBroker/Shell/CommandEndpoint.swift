import Logging
import RollCallCore
import RollCallSecurity
import RollCallWire
import ZeroMQ

/// The command endpoint (ROUTER) and what it knows of its peers: requests read and framed, the connection each came
/// on (``ConnectionTracker``, from the socket monitor), and, with CURVE, who each peer is.
///
/// CURVE authentication (ZAP, ZeroMQ RFC 27): libzmq asks the ZAP handler about every CURVE handshake on either
/// endpoint, with the client's public key. The endpoint answers at once from the authorized-keys table
/// (Machine/CurveGate.swift): a known key is accepted with its Z85 text as the connection's `User-Id`, which libzmq
/// then attaches to every message from that connection; an unknown key is refused with 400, and the client's
/// handshake fails (it learns it from its socket monitor only, libzmq#3505). Every request and subscription is then
/// authorized against the key's role in the table as it is at that moment, so that a reload takes effect on a
/// connection's next message.
final class CommandEndpoint {
    private let router: Socket
    private let monitor: Socket
    private let zap: Socket?
    private let logger: Logger
    private let metrics: BrokerMetrics
    private let maxConnections: Int
    private let maxMessageBytes: Int
    private let limits: PresenceCore.Configuration
    /// With CURVE: who may connect and what each connection may do.
    private var curve: CurveGate
    /// Refused handshakes and refused connections are each logged at most every 10 s.
    private var handshakeWarnings = WarningThrottle()
    private var refusalWarnings = WarningThrottle()
    /// The ROUTER's connections, from the socket monitor.
    private var connections = ConnectionTracker()
    /// Connections seen to close and not yet handed to the loop, and whether any closed since it last asked.
    private var closed: [ConnectionTracker.Connection] = []
    private var disconnected = false

    init(
        router: Socket, monitor: Socket, zap: Socket?, configuration: BrokerConfiguration, logger: Logger,
        metrics: BrokerMetrics
    ) {
        self.router = router
        self.monitor = monitor
        self.zap = zap
        self.logger = logger
        self.metrics = metrics
        maxConnections = configuration.maxConnections
        maxMessageBytes = configuration.maxMessageBytes
        limits = configuration.presence
        curve = CurveGate(keys: configuration.curve?.authorizedKeys)
    }

    /// Whether peers are identified by CURVE keys.
    var hasKeys: Bool { curve.keys != nil }
    /// Open command connections.
    var connectionCount: Int { connections.count }

    /// A new connection id from the same count as the ROUTER's connections (a WebSocket's).
    func issueConnectionID() -> ConnectionID { connections.issue() }

    /// What the connection a message came on may do (``CurveGate/access(userID:)``).
    func access(userID: String?) -> Access { curve.access(userID: userID) }

    // MARK: Requests

    /// One request read from the ROUTER, framed and decoded.
    enum Received {
        /// The request, or its ready answer, with the body as it came (for the fair queue) and its envelope.
        case work(RequestWork, body: [UInt8], envelope: [[UInt8]])
        /// A request from a connection that has closed: nobody reads its answer.
        case dropped
    }

    /// Reads the next request, or `nil` when none waits. Connections that the look-up of its origin found closed
    /// wait in ``takeClosed()``: the loop ends their sessions before it runs the request.
    func receive(now: BrokerTime) throws -> Received? {
        guard
            let (frames, truncated) = try router.receiveMessage(
                maxFrames: RequestFrames.maxFrames, sourceDescriptor: true, userID: curve.keys != nil)
        else { return nil }
        let split = RequestFrames(sizes: frames.lazy.map(\.bytes.count))
        let (bodyStart, bodies) = (split.bodyStart, split.bodies)
        let envelope = frames[..<bodyStart].map(\.bytes)
        let body = bodies == 1 ? frames[bodyStart].bytes : []
        if let refusal = split.refusal(
            bodyBytes: bodies == 1 ? body.count : nil, truncated: truncated, maxBytes: maxMessageBytes)
        {
            metrics.request(nil, failed: refusal.code)
            return .work(.answer(Codec.encodeReply(id: nil, .failure(refusal))), body: body, envelope: envelope)
        }
        let connection: ConnectionID?
        do {
            switch try origin(
                descriptor: frames[bodyStart].sourceFD, routingID: frames[0].bytes, userID: frames[bodyStart].userID,
                now: now)
            {
            case .connection(let id): connection = id
            case .untracked: connection = nil
            case .closed:
                logger.debug("request from a closed connection dropped")
                return .dropped
            }
        } catch {
            logger.error("reading connection events failed", metadata: ["error": "\(error)"])
            connection = nil
        }
        switch Codec.decodeRequest(body, limits: limits) {
        case .failure(let rejection):
            logger.debug("request rejected", metadata: ["code": "\(rejection.error.code.rawValue)"])
            metrics.request(nil, failed: rejection.error.code)
            let answer = Codec.encodeReply(id: rejection.id, .failure(rejection.error))
            return .work(.answer(answer), body: body, envelope: envelope)
        case .success(let request):
            let work = RequestWork.request(
                request, connection: connection, userID: frames[bodyStart].userID, bytes: body.count)
            return .work(work, body: body, envelope: envelope)
        }
    }

    /// Sends a reply on its envelope. ROUTER drops replies to peers that are gone or not reading; it never blocks.
    func send(_ reply: [UInt8], envelope: [[UInt8]]) {
        do {
            try router.send(message: envelope + [reply])
        } catch {
            logger.error("reply failed", metadata: ["error": "\(error)"])
        }
    }

    // MARK: Connections

    /// Reads every pending connection event; the connections that closed wait in ``takeClosed()``. A connection
    /// past `--max-connections` is closed at once: it has sent nothing yet, so it holds no session.
    func readConnectionEvents(now: BrokerTime) throws {
        while let event = try monitor.receiveMonitorEvent() {
            switch event.kind {
            case .accepted:
                closed += connections.apply(.accepted(descriptor: event.value))
                if connections.count > maxConnections { refuse(event, now: now) }
            case .disconnected:
                closed += connections.apply(.disconnected(descriptor: event.value))
                disconnected = true
            default:
                continue
            }
        }
    }

    /// The connections seen to close since the last call, and whether any TCP connection went (libzmq frees its
    /// pipes just after the event, so the broker may give memory back soon).
    func takeClosed() -> (connections: [ConnectionTracker.Connection], disconnected: Bool) {
        guard disconnected || !closed.isEmpty else { return ([], false) }  // most calls: nothing closed
        defer { (closed, disconnected) = ([], false) }
        return (closed, disconnected)
    }

    /// The connection a request came on, from its source descriptor and routing id: at once when the tracker
    /// knows them together, else after the pending connection events are read.
    private func origin(descriptor: Int32, routingID: [UInt8], userID: String?, now: BrokerTime) throws
        -> RequestOrigin
    {
        if let known = connections.knownOrigin(descriptor: descriptor, routingID: routingID) { return known }
        try readConnectionEvents(now: now)
        return connections.origin(descriptor: descriptor, routingID: routingID, userID: userID)
    }

    /// Closes a connection past `--max-connections`; its DISCONNECTED follows and the tracker forgets it.
    private func refuse(_ event: MonitorEvent, now: BrokerTime) {
        event.shutDownConnection()
        metrics.refusedConnection()
        if refusalWarnings.allows(now: now) {
            logger.warning(
                "connection refused: the broker holds its maximum of connections",
                metadata: ["max": "\(maxConnections)"])
        }
    }

    // MARK: Keys

    /// Answers the ZAP requests waiting: a REP socket, so each gets its reply before the next is read. A refusal is
    /// counted and logged at most every 10 s.
    func answerHandshakes(batch: Int, now: BrokerTime) throws {
        guard let zap else { return }
        for _ in 0..<batch {
            guard let (frames, _) = try zap.receiveMessage(maxFrames: 8) else { return }
            let request = frames.map(\.bytes)
            let answer = curve.zapReply(to: request)
            if let reason = answer.refusal {
                metrics.refusedHandshake()
                if handshakeWarnings.allows(now: now) {
                    let address = request.count > 3 ? String(decoding: request[3], as: UTF8.self) : "-"
                    logger.warning(
                        "handshake refused (logged at most every 10 s; rollcall_handshakes_refused_total counts them)",
                        metadata: ["reason": "\(reason)", "address": "\(address)"])
                }
            } else {
                logger.debug("handshake accepted")
            }
            try zap.send(message: answer.reply)
        }
    }

    /// Takes a reloaded table: handshakes and messages from now on are checked against it. What the keys it removed
    /// hold is for the caller to end.
    func replace(authorizedKeys keys: AuthorizedKeys) -> CurveGate.Reload? {
        guard let reload = curve.replace(with: keys) else { return nil }
        logger.info(
            "authorized keys replaced",
            metadata: ["keys": "\(keys.roles.count)", "added": "\(reload.added)", "removed": "\(reload.removed.count)"])
        return reload
    }

    /// Shuts down the command connections whose requests came with `key` (`shutdown(2)`: libzmq then sees end-of-file
    /// and closes them itself); their ids, and how many were shut down.
    func shutDownConnections(of key: CurveKey) -> (ids: [ConnectionID], closed: Int) {
        let own = connections.connections(where: { $0 == key.z85 })
        var closed = 0
        for (descriptor, _) in own where ConnectionDescriptor.shutDown(descriptor) { closed += 1 }
        return (own.map(\.connection.id), closed)
    }
}
