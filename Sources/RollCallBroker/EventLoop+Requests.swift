import Logging
import RollCallCore
import RollCallSecurity
import RollCallWire
import ZeroMQ

extension EventLoop {
    /// The most frames a request message may have: routing id, a REQ delimiter or a short routing stack, a body.
    static let maxFrames = 8

    /// Fewer bytes than any member's entry in a reply takes (`"a":{"user":"a","status":"online",...}`).
    static let smallestRecordBytes = 64

    /// Handles the requests waiting on the ROUTER, up to a batch. Expensive ones are queued (see
    /// EventLoop+Fairness.swift); none are read while the queue holds too many bytes.
    func handleRequests() throws {
        for _ in 0..<Self.batch {
            guard deferredBytes < Self.maxDeferredBytes else { return }
            guard
                let (frames, truncated) = try router.receiveMessage(
                    maxFrames: Self.maxFrames, sourceDescriptor: true, userID: authorizedKeys != nil)
            else { return }
            handle(frames, truncated: truncated)
        }
    }

    /// Answers one request exactly once, on the envelope it came with: at once, or, when it is expensive or its
    /// connection already waits for an expensive answer, later and in order (EventLoop+Fairness.swift).
    func handle(_ frames: [Socket.Frame], truncated: Bool) {
        // [routing id][...routing stack...][empty delimiter][body] from REQ; [routing id][body] from DEALER.
        var bodyStart = 1
        if let delimiter = frames.dropFirst().firstIndex(where: { $0.bytes.isEmpty }) { bodyStart = delimiter + 1 }
        let envelope = frames[..<bodyStart].map(\.bytes)
        let bodies = frames.count - bodyStart
        let work: Work
        if truncated || bodies != 1 {
            metrics.request(nil, failed: .badRequest)
            let detail =
                truncated ? "this message had more than \(Self.maxFrames) frames" : "this message had \(bodies)"
            work = .answer(
                Codec.encodeReply(
                    id: nil,
                    .failure(PresenceError(.badRequest, "a request is one body frame after the envelope; \(detail)"))))
        } else if frames[bodyStart].bytes.count > configuration.maxMessageBytes {
            metrics.request(nil, failed: .tooLarge)
            work = .answer(
                Codec.encodeReply(
                    id: nil,
                    .failure(
                        PresenceError(
                            .tooLarge,
                            "request of \(frames[bodyStart].bytes.count) bytes; at most \(configuration.maxMessageBytes)"
                        ))))
        } else {
            let connection: ConnectionID?
            do {
                switch try origin(descriptor: frames[bodyStart].sourceFD, routingID: frames[0].bytes) {
                case .connection(let id): connection = id
                case .untracked: connection = nil
                case .closed:
                    logger.debug("request from a closed connection dropped")
                    return
                }
            } catch {
                logger.error("reading connection events failed", metadata: ["error": "\(error)"])
                connection = nil
            }
            switch Codec.decodeRequest(frames[bodyStart].bytes, limits: configuration.presence) {
            case .failure(let rejection):
                logger.debug("request rejected", metadata: ["code": "\(rejection.error.code.rawValue)"])
                metrics.request(nil, failed: rejection.error.code)
                work = .answer(Codec.encodeReply(id: rejection.id, .failure(rejection.error)))
            case .success(let request):
                work = .request(
                    request, connection: connection, userID: frames[bodyStart].userID,
                    bytes: frames[bodyStart].bytes.count)
            }
        }
        // The look-up by routing id only when anything is queued at all: most rounds nothing is.
        let key = FairnessKey.router(frames[0].bytes)
        if work.isExpensive || (!deferred.isEmpty && deferred[key] != nil) {
            enqueue(
                work, body: bodies == 1 ? frames[bodyStart].bytes : [], key: key, route: .router(envelope: envelope))
        } else {
            answer(work, route: .router(envelope: envelope))
        }
    }

    /// Runs a request (or takes its ready answer) and sends the reply where it goes.
    func answer(_ work: Work, route: ReplyRoute) {
        guard case .router(let envelope) = route else {
            if case .webSocket(let id) = route, case .gateway(let request) = work { answerGateway(request, from: id) }
            return
        }
        let reply: [UInt8]
        switch work {
        case .gateway:
            return  // a WebSocket frame always has a WebSocket route
        case .answer(let bytes):
            reply = bytes
        case .request(let request, let connection, let userID, _):
            reply = Codec.encodeReply(
                id: request.id, counted(request.request, connection: connection, access: access(userID: userID)),
                maxBytes: configuration.maxReplyBytes)
        case .queued(let body, let connection, let userID):
            switch Codec.decodeRequest(body, limits: configuration.presence) {
            case .success(let request):
                reply = Codec.encodeReply(
                    id: request.id, counted(request.request, connection: connection, access: access(userID: userID)),
                    maxBytes: configuration.maxReplyBytes)
            case .failure(let rejection):  // it was decoded once already; the same bytes decode the same way
                reply = Codec.encodeReply(id: rejection.id, .failure(rejection.error))
            }
        }
        do {
            // ROUTER drops replies to peers that are gone or not reading; it never blocks.
            try router.send(message: envelope + [reply])
        } catch {
            logger.error("reply failed", metadata: ["error": "\(error)"])
        }
    }

    /// Authorizes and runs a request, and counts its outcome for `rollcall_requests_total`. A refused request
    /// changes nothing.
    func counted(_ request: Request, connection: ConnectionID?, access: Access) -> Result<Reply, PresenceError> {
        let result: Result<Reply, PresenceError>
        if let refusal = Authorization.refusal(of: request, by: access, owner: { core.user(of: $0) }) {
            logger.debug("request forbidden", metadata: ["op": "\(request.op)", "reason": "\(refusal.message)"])
            result = .failure(refusal)
        } else {
            result = execute(request, connection: connection, access: access)
            // A node of a cluster writes each change with the value it had then: two changes of one session in one
            // round are two writes, and every node publishes both.
            if cluster != nil { handleSessionEvents() }
        }
        switch result {
        case .success: metrics.request(request, failed: nil)
        case .failure(let error): metrics.request(request, failed: error.code)
        }
        return result
    }

    func execute(_ request: Request, connection: ConnectionID?, access: Access) -> Result<Reply, PresenceError> {
        let now = clock.now()
        // A node cut off from the cluster (etcd unanswered for two thirds of its lease) acknowledges no renewal and no
        // change on its sessions: its lease may run out before etcd hears of it, and the client must fail over rather
        // than believe a change that no other node will ever see (docs/cluster.md, "Honest under partition"). A `bye`
        // is still taken: an end is true whatever happens to the lease, and a bye refused now would let the session
        // come back when the node joins again.
        if request.renewsSession, let refusal = clusterRefusal { return .failure(refusal) }
        switch request {
        case .hello(let hello):
            if let refusal = clusterRefusal { return .failure(refusal) }
            let session = SessionID(Token.random(bits: 96))
            let outcome = core.hello(hello, session: session, connection: connection, now: now)
            performLocal(outcome.actions, now: now)
            return outcome.reply.map(Reply.hello)
        case .heartbeat(let session):
            return core.heartbeat(session: session, connection: connection, now: now).reply.map { .done }
        case .status(let session, let status, let text, let after?):
            return core.holdStatus(
                session: session, status: status, text: text, after: after, connection: connection, now: now
            ).reply.map { $0 ? .held : .done }
        case .status(let session, let status, let text, nil):
            let outcome = core.setStatus(
                session: session, status: status, text: text, connection: connection, now: now)
            performLocal(outcome.actions, now: now)
            return outcome.reply.map { .done }
        case .bye(let session):
            let outcome = core.bye(session: session, now: now)
            performLocal(outcome.actions, now: now)
            return outcome.reply.map { .done }
        case .query(let users):
            // Where each distinct user was first named: a paged reply's `next` points back into the request.
            var seen = Set<UserID>()
            let positions = users.indices.filter { seen.insert(users[$0]).inserted }
            // The truth about an invisible user for the user's own keys and connections, and for operators.
            let seesTruth = { (user: UserID) in
                access.seesTruth(about: user)
                    || connection.map { self.core.connection($0, carriesSessionOf: user) } == true
            }
            // A node cut off from the cluster cannot vouch for anyone's presence.
            if let refusal = clusterRefusal { return .failure(refusal) }
            return published.query(users, now: now, seesTruth: seesTruth).map { .query($0, positions: positions) }
        case .ping:
            return .success(
                .ping(
                    BrokerInfo(
                        broker: configuration.brokerID, version: rollCallVersion, epoch: epoch, time: now,
                        testMode: configuration.testMode, cluster: cluster?.standing)))
        case .advance(let milliseconds):
            guard configuration.testMode else { return .failure(PresenceError(.unknownOp, "unknown op 'advance'")) }
            // Connections that closed before this request are closed before the clock moves, as on a real clock.
            do {
                try handleConnectionEvents()
            } catch {
                logger.error("reading connection events failed", metadata: ["error": "\(error)"])
            }
            advance(to: now + milliseconds)
            logger.debug("clock advanced", metadata: ["ms": "\(milliseconds)", "time": "\(clock.now())"])
            return .success(.advanced(time: clock.now()))
        case .group(let group, let edit, let after):
            // Group messages go out from the loop's flush, batched; the reply answers at once, with one page of
            // members: no more records are made than the smallest record could fill the reply with.
            let limit = configuration.maxReplyBytes / Self.smallestRecordBytes + 1
            if cluster != nil {
                return editGroupInCluster(group, edit, after: after, limit: limit, now: now).map(Reply.group)
            }
            return core.group(group, edit, after: after, limit: limit, now: now).map(Reply.group)
        case .ungroup(let group):
            if let refusal = clusterRefusal { return .failure(refusal) }
            let outcome = ungroupInCluster(group, now: now)
            perform(outcome.actions, now: now)
            if case .success(true) = outcome.reply { logger.debug("group deleted", metadata: ["group": "\(group)"]) }
            return outcome.reply.map { .ungroup(deleted: $0) }
        }
    }
}
