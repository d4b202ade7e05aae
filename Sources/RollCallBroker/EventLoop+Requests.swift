import RollCallCore
import RollCallSecurity
import RollCallWire

/// Requests from either door, answered exactly once and in each connection's order: cheap ones at once, expensive
/// ones in their turn in the one fair queue (Shell/RequestQueue.swift); a read of the log goes to the reader thread,
/// its connection held until the reply.
extension EventLoop {
    /// Handles the requests waiting on the ROUTER, up to a batch, none while the queue is full. Connections found
    /// closed while naming a request's connection are closed before the request runs.
    func handleRequests() throws {
        for _ in 0..<Self.batch {
            guard !requests.isFull, let received = try commands.receive(now: clock.now()) else { return }
            closeConnections()
            guard case .work(let work, let body, let envelope) = received else { continue }
            let key = FairnessKey.router(envelope.first ?? [])
            requests.take(work, body: body, key: key, route: .router(envelope: envelope), answer: answer)
        }
    }

    /// Runs a request (or takes its ready answer) and sends the reply where it goes. Whether the reply waits for etcd
    /// instead (``awaitedReplies``): the connection is then held, its later requests queued behind it.
    @discardableResult
    func answer(_ work: RequestWork, route: ReplyRoute) -> Bool {
        switch work.decoded(limits: configuration.presence) {
        case .answer(let reply): send(reply, route: route)
        case .request(let request, let connection, let userID, _):
            guard
                let result = counted(
                    request.request, connection: connection, access: commands.access(userID: userID),
                    awaited: (request.id, route))
            else { return true }
            send(Codec.encodeReply(id: request.id, result, maxBytes: configuration.maxReplyBytes), route: route)
        case .gateway(let request):
            guard case .webSocket(let id) = route else { return false }
            answerGateway(request, from: id)
            return !awaitedReplies.isEmpty && awaitedReplies.values.contains { $0.route.key == route.key }
        case .queued: break  // decoded above
        }
        return false
    }

    /// Sends a reply that waited for etcd (``BrokerMachine/Effect/answer(ticket:_:)``), and lets its connection's
    /// later requests take turns again.
    func answerAwaited(_ ticket: UInt64, _ result: Result<Reply, PresenceError>) {
        guard let awaited = awaitedReplies.removeValue(forKey: ticket) else { return }
        metrics.request(awaited.request, failed: result.failureCode)
        send(Codec.encodeReply(id: awaited.id, result, maxBytes: configuration.maxReplyBytes), route: awaited.route)
        requests.release(awaited.route.key)
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
    /// `rollcall_requests_total`. A refused request changes nothing. `nil`: the reply waits for etcd; it goes to
    /// `awaited` (the request's id and route) later, and the route's connection is held until then.
    func counted(
        _ request: Request, connection: ConnectionID?, access: Access, awaited: (id: JSON?, route: ReplyRoute)
    ) -> Result<Reply, PresenceError>? {
        let result: Result<Reply, PresenceError>  // a read of the log never comes here: ``startRead``
        switch machine.handle(request, connection: connection, access: access, now: clock.now()) {
        case .reply(let reply): result = reply
        case .afterEtcd(let ticket):
            awaitedReplies[ticket] = AwaitedReply(id: awaited.id, route: awaited.route, request: request)
            requests.hold(awaited.route.key)
            carryOutEffects()
            return nil
        case .advanceClock(let milliseconds):
            // Connections that closed before this request are closed before the clock moves, as on a real clock.
            try? handleConnectionEvents()
            // What waits for the log goes out before the clock moves (it is not late: the clock jumped), and what the
            // advance publishes before the reply, as the protocol says.
            store?.waitForLog(machine: &machine, now: clock.now(), timeout: .seconds(5))
            carryOutEffects()
            advance(to: clock.now() + milliseconds)
            store?.waitForLog(machine: &machine, now: clock.now(), timeout: .seconds(5))
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

    /// Ends the sessions of the connections that closed, after their queued edits and bye.
    private func closeConnections() {
        let (closed, disconnected) = commands.takeClosed()
        // libzmq frees a closed connection's pipes just after its event: the broker gives memory back soon after.
        if disconnected { schedule.connectionClosed(now: clock.now()) }
        for connection in closed {
            if let routingID = connection.routingID { finishQueuedWrites(.router(routingID)) }
            let users = machine.connectionClosed(connection.id, now: clock.now())
            carryOutEffects()
            if users > 0 {
                logger.debug("connection closed", metadata: ["connection": "\(connection.id)", "users": "\(users)"])
            }
        }
    }

    /// Runs the queued writes of a connection that closed, before its close is handled (RequestQueue.removeAll).
    func finishQueuedWrites(_ key: FairnessKey) {
        store?.forgetReads(of: key)
        for item in requests.removeAll(for: key, limits: configuration.presence) {
            answer(item.work, route: item.route)
        }
    }

    /// Runs a queued request in its turn: a read of the log goes to the reader thread, anything else is answered.
    func takeTurn(_ item: DeferredWork) -> TurnOutcome {
        let (work, route) = (item.work.decoded(limits: configuration.presence), item.route)
        switch (work, route) {
        case (.request(let envelope, _, let userID, _), .router) where envelope.request.readsLog:
            return startRead(envelope, access: commands.access(userID: userID), route: route)
        case (.gateway(.success(.request(let envelope))), .webSocket(let id)) where envelope.request.readsLog:
            guard let access = webSockets.access(of: id) else { return .done }  // closed: nobody reads the answer
            return startRead(envelope, access: access, route: route)
        case (.gateway(.success(.subscribe(let requestID, let topics, let after?, let epoch))), .webSocket(let id)):
            guard webSockets.access(of: id) != nil else { return .done }  // closed: nobody reads the answer
            return startResume(requestID, topics: topics, after: after, logEpoch: epoch, id: id)
        default:
            return answer(work, route: route) ? .reading : .done
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
            started = store.startRead(
                request, key: route.key, viewer: access.viewer, machine: &machine, now: clock.now()
            ) {
                read, rows in
                mailbox.post { loop in
                    guard let store = loop.store else { return }
                    for key in store.readFinished() + [route.key] { loop.requests.release(key) }
                    reply(
                        store.reply(to: read, rows, published: loop.machine.published, now: loop.clock.now()), on: loop)
                }
            }
        }
        switch started {
        case .answered(let result): reply(result, on: self)
        case .reading: return .reading
        case .full: return .full
        case .waitsForLog: return .waitsForLog
        }
        return .done
    }
}
