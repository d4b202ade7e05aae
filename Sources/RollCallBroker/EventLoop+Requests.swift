import Logging
import RollCallCore
import RollCallSecurity
import RollCallWire
import ZeroMQ

extension EventLoop {
    /// Handles the requests waiting on the ROUTER, up to a batch. Expensive ones are queued (see
    /// EventLoop+Fairness.swift); none are read while the queue holds too many bytes.
    func handleRequests() throws {
        for _ in 0..<Self.batch {
            guard deferred.bytes < Self.maxDeferredBytes else { return }
            guard
                let (frames, truncated) = try sockets.router.receiveMessage(
                    maxFrames: RequestFrames.maxFrames, sourceDescriptor: true, userID: curve.keys != nil)
            else { return }
            handle(frames, truncated: truncated)
        }
    }

    /// Answers one request exactly once, on the envelope it came with: at once, or, when it is expensive or its
    /// connection already waits for an expensive answer, later and in order (EventLoop+Fairness.swift).
    func handle(_ frames: [Socket.Frame], truncated: Bool) {
        let split = RequestFrames(sizes: frames.lazy.map(\.bytes.count))
        let (bodyStart, bodies) = (split.bodyStart, split.bodies)
        let envelope = frames[..<bodyStart].map(\.bytes)
        let work: Work
        if let refusal = split.refusal(
            bodyBytes: bodies == 1 ? frames[bodyStart].bytes.count : nil, truncated: truncated,
            maxBytes: configuration.maxMessageBytes)
        {
            metrics.request(nil, failed: refusal.code)
            work = .answer(Codec.encodeReply(id: nil, .failure(refusal)))
        } else {
            let connection: ConnectionID?
            do {
                switch try origin(
                    descriptor: frames[bodyStart].sourceFD, routingID: frames[0].bytes, userID: frames[bodyStart].userID
                )
                {
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
        if work.isExpensive || deferred.isWaiting(key) {
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
            try sockets.router.send(message: envelope + [reply])
        } catch {
            logger.error("reply failed", metadata: ["error": "\(error)"])
        }
    }

    /// Authorizes and runs a request (BrokerMachine.swift), carries out what it did, and counts its outcome for
    /// `rollcall_requests_total`. A refused request changes nothing.
    func counted(_ request: Request, connection: ConnectionID?, access: Access) -> Result<Reply, PresenceError> {
        let result: Result<Reply, PresenceError>  // a read of the log never comes here: EventLoop+History.swift
        switch machine.handle(request, connection: connection, access: access, now: clock.now()) {
        case .reply(let reply): result = reply
        case .advanceClock(let milliseconds): result = .success(advance(by: milliseconds))
        }
        carryOutEffects()
        switch result {
        case .success: metrics.request(request, failed: nil)
        case .failure(let error):
            if error.code == .forbidden {
                logger.debug("request forbidden", metadata: ["op": "\(request.op)", "reason": "\(error.message)"])
            }
            metrics.request(request, failed: error.code)
        }
        return result
    }

    /// Test mode's `advance`: connections that closed before this request are closed before the clock moves, as on
    /// a real clock.
    private func advance(by milliseconds: Int64) -> Reply {
        do {
            try handleConnectionEvents()
        } catch {
            logger.error("reading connection events failed", metadata: ["error": "\(error)"])
        }
        advance(to: clock.now() + milliseconds)
        logger.debug("clock advanced", metadata: ["ms": "\(milliseconds)", "time": "\(clock.now())"])
        return .advanced(time: clock.now())
    }
}
