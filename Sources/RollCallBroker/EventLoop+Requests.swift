import RollCallCore
import RollCallSecurity
import RollCallWire

/// Requests from either door, answered exactly once and in each connection's order.
///
/// Fairness between cheap and expensive requests: a page of a large group or a query of many users costs the loop up
/// to a reply of `maxReplyBytes` to build, so the loop answers cheap requests as it reads them and puts expensive
/// ones in one fair queue (Machine/FairQueue.swift) per connection, whose turns it takes one connection after the other
/// for at most ``expensiveSlice`` per round. A connection that waits for an expensive answer has its later requests
/// queued behind it. WebSocket reads wait in the same queue, so the bound holds whatever door the work came through
/// (docs/reliability.md). A read of the log goes to the reader thread, its connection held until the reply.
extension EventLoop {
    /// The most time one round spends on queued expensive requests before it reads the ROUTER again.
    static let expensiveSlice: Duration = .milliseconds(5)
    /// The request bytes the queues may hold; past it the loop stops reading the ROUTER until they drain, and
    /// libzmq's receive high-water mark holds further requests back.
    static let maxDeferredBytes = 8 * 1_048_576

    /// Handles the requests waiting on the ROUTER, up to a batch; none are read while the queue holds too many bytes.
    /// Connections found closed while naming a request's connection are closed before the request runs.
    func handleRequests() throws {
        for _ in 0..<Self.batch {
            guard deferred.bytes < Self.maxDeferredBytes, let received = try commands.receive(now: clock.now())
            else { return }
            closeConnections()
            guard case .work(let work, let body, let envelope) = received else { continue }
            let key = FairnessKey.router(envelope.first ?? [])
            take(work, body: body, key: key, route: .router(envelope: envelope))
        }
    }

    /// Answers `work` at once, or queues it when it is expensive or its connection already waits.
    func take(_ work: RequestWork, body: [UInt8], key: FairnessKey, route: ReplyRoute) {
        guard work.isExpensive || deferred.isWaiting(key) else { return answer(work, route: route) }
        let expensive = work.isExpensive
        let queued = work.queued(body: body)
        deferred.append(
            DeferredWork(work: queued, route: route, expensive: expensive), for: key, expensive: expensive,
            bytes: queued.bytes)
    }

    /// Runs a request (or takes its ready answer) and sends the reply where it goes.
    func answer(_ work: RequestWork, route: ReplyRoute) {
        switch work.decoded(limits: configuration.presence) {
        case .answer(let reply): send(reply, route: route)
        case .request(let request, let connection, let userID, _):
            let result = counted(request.request, connection: connection, access: commands.access(userID: userID))
            send(Codec.encodeReply(id: request.id, result, maxBytes: configuration.maxReplyBytes), route: route)
        case .gateway(let request): if case .webSocket(let id) = route { answerGateway(request, from: id) }
        case .queued: break  // decoded above
        }
    }

    /// Sends a reply where it goes (a connection closed meanwhile gets nothing); a WebSocket connection may then hand
    /// the loop its next request.
    func send(_ reply: [UInt8], route: ReplyRoute) {
        switch route {
        case .router(let envelope): commands.send(reply, envelope: envelope)
        case .webSocket(let id):
            webSockets.deliver(reply, to: id)
            webSockets.requestDone(id)
        }
    }

    /// Runs a request through the machine, carries out what it did, and counts its outcome for
    /// `rollcall_requests_total`. A refused request changes nothing.
    func counted(_ request: Request, connection: ConnectionID?, access: Access) -> Result<Reply, PresenceError> {
        let result: Result<Reply, PresenceError>  // a read of the log never comes here: ``startRead``
        switch machine.handle(request, connection: connection, access: access, now: clock.now()) {
        case .reply(let reply): result = reply
        case .advanceClock(let milliseconds):
            // Connections that closed before this request are closed before the clock moves, as on a real clock.
            try? handleConnectionEvents()
            advance(to: clock.now() + milliseconds)
            result = .success(.advanced(time: clock.now()))
        }
        carryOutEffects()
        if case .failure(let error) = result, error.code == .forbidden {
            logger.debug("request forbidden", metadata: ["op": "\(request.op)", "reason": "\(error.message)"])
        }
        metrics.request(request, failed: result.failureCode)
        return result
    }

    /// Reads the ROUTER's connection events, and closes the connections that went.
    func handleConnectionEvents() throws {
        try commands.readConnectionEvents(now: clock.now())
        closeConnections()
    }

    /// Ends the sessions of the connections that closed, after their queued edits and bye (``finishDeferredWork``).
    private func closeConnections() {
        let (closed, disconnected) = commands.takeClosed()
        // libzmq frees a closed connection's pipes just after its event: the broker gives memory back soon after.
        if disconnected { schedule.connectionClosed(now: clock.now()) }
        for connection in closed {
            if let routingID = connection.routingID { finishDeferredWork(.router(routingID)) }
            let users = machine.connectionClosed(connection.id, now: clock.now())
            carryOutEffects()
            if users > 0 {
                logger.debug("connection closed", metadata: ["connection": "\(connection.id)", "users": "\(users)"])
            }
        }
    }

    /// Works through the queues, one expensive request (and the cheap ones queued behind it) per connection per
    /// turn, until they are empty or the slice is used up.
    func handleDeferredWork() {
        let start = ContinuousClock.now
        while let turn = deferred.nextTurn() {
            for (index, item) in turn.items.enumerated() {
                let outcome = takeTurn(item.work, route: item.route)
                if outcome == .done { continue }
                let rest = turn.items[(outcome == .reading ? index + 1 : index)...]
                deferred.hold(turn.key, rest: rest.map { ($0, $0.expensive, $0.work.bytes) })
                if outcome == .full { store?.park(turn.key) }
                break
            }
            if ContinuousClock.now - start >= Self.expensiveSlice { return }
        }
    }

    /// Runs the queued requests of a connection that closed, before its close is handled: a `bye` queued behind a
    /// group read still counts as a bye, and a queued group edit still applies (docs/protocol.md §10.4). Queued reads
    /// are dropped: nobody can read their replies.
    func finishDeferredWork(_ key: FairnessKey) {
        for item in deferred.removeAll(for: key) where item.work.decoded(limits: configuration.presence).isWrite {
            answer(item.work, route: item.route)
        }
    }

    /// Runs a queued request in its turn: a read of the log goes to the reader thread, anything else is answered.
    private func takeTurn(_ work: RequestWork, route: ReplyRoute) -> TurnOutcome {
        let work = work.decoded(limits: configuration.presence)
        switch (work, route) {
        case (.request(let envelope, _, let userID, _), .router) where envelope.request.readsLog:
            return startRead(envelope, access: commands.access(userID: userID), route: route)
        case (.gateway(.success(.request(let envelope))), .webSocket(let id)) where envelope.request.readsLog:
            guard let access = webSockets.access(of: id) else { return .done }  // closed: nobody reads the answer
            return startRead(envelope, access: access, route: route)
        default:
            answer(work, route: route)
            return .done
        }
    }

    /// Starts a read of the log (StoreSide.swift) after the same authorization as every request. When its rows are
    /// back, the reply goes out (privacy judged then), and the connection's later requests take turns again, and so
    /// do connections that waited for a slot of the reader.
    private func startRead(_ envelope: RequestEnvelope, access: Access, route: ReplyRoute) -> TurnOutcome {
        let (request, mailbox) = (envelope.request, signals.mailbox)
        @Sendable func reply(_ result: Result<Reply, PresenceError>, on loop: EventLoop) {
            loop.metrics.request(request, failed: result.failureCode)
            loop.send(
                Codec.encodeReply(id: envelope.id, result, maxBytes: loop.configuration.maxReplyBytes), route: route)
        }
        var started = StoreSide.ReadStart.answered(.failure(StoreSide.noLog))
        if let refusal = Authorization.refusal(of: request, by: access, owner: { _ in nil }) {
            started = .answered(.failure(refusal))
        } else if let store {
            started = store.startRead(request, viewer: access.viewer, machine: &machine, now: clock.now()) {
                read, rows in
                mailbox.post { loop in
                    guard let store = loop.store else { return }
                    for key in store.readFinished() + [route.key] { loop.deferred.release(key) }
                    reply(
                        store.reply(to: read, rows, published: loop.machine.published, now: loop.clock.now()), on: loop)
                }
            }
        }
        switch started {
        case .answered(let result): reply(result, on: self)
        case .reading: return .reading
        case .full: return .full
        }
        return .done
    }
}
