import Logging
import RollCallCore
import RollCallWire
import ZeroMQ

extension EventLoop {
    /// The most frames a request message may have: routing id, a REQ delimiter or a short routing stack, a body.
    static let maxFrames = 8

    /// Handles the requests waiting on the ROUTER, up to a batch.
    func handleRequests() throws {
        for _ in 0..<Self.batch {
            guard let (frames, truncated) = try router.receiveMessage(maxFrames: Self.maxFrames) else { return }
            handle(frames, truncated: truncated)
        }
    }

    /// Answers one request exactly once, on the envelope it came with.
    func handle(_ frames: [Socket.Frame], truncated: Bool) {
        // [routing id][...routing stack...][empty delimiter][body] from REQ; [routing id][body] from DEALER.
        var bodyStart = 1
        if let delimiter = frames.dropFirst().firstIndex(where: { $0.bytes.isEmpty }) { bodyStart = delimiter + 1 }
        let envelope = frames[..<bodyStart].map(\.bytes)
        let bodies = frames.count - bodyStart
        let reply: [UInt8]
        if truncated || bodies != 1 {
            let detail =
                truncated ? "this message had more than \(Self.maxFrames) frames" : "this message had \(bodies)"
            reply = Codec.encodeReply(
                id: nil,
                .failure(PresenceError(.badRequest, "a request is one body frame after the envelope; \(detail)")))
        } else if frames[bodyStart].bytes.count > configuration.maxMessageBytes {
            reply = Codec.encodeReply(
                id: nil,
                .failure(
                    PresenceError(
                        .tooLarge,
                        "request of \(frames[bodyStart].bytes.count) bytes; at most \(configuration.maxMessageBytes)")))
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
            reply = respond(to: frames[bodyStart].bytes, connection: connection)
        }
        do {
            // ROUTER drops replies to peers that are gone or not reading; it never blocks.
            try router.send(message: envelope + [reply])
        } catch {
            logger.error("reply failed", metadata: ["error": "\(error)"])
        }
    }

    /// Decodes a body, runs it through the core, publishes what changed and returns the encoded reply.
    func respond(to body: [UInt8], connection: ConnectionID?) -> [UInt8] {
        switch Codec.decodeRequest(body, limits: configuration.presence) {
        case .failure(let rejection):
            logger.debug("request rejected", metadata: ["code": "\(rejection.error.code.rawValue)"])
            metrics.request(op: "invalid", result: rejection.error.code.rawValue)
            return Codec.encodeReply(id: rejection.id, .failure(rejection.error))
        case .success(let envelope):
            let result = execute(envelope.request, connection: connection)
            switch result {
            case .success: metrics.request(op: envelope.request.op, result: "ok")
            case .failure(let error): metrics.request(op: envelope.request.op, result: error.code.rawValue)
            }
            return Codec.encodeReply(id: envelope.id, result)
        }
    }

    func execute(_ request: Request, connection: ConnectionID?) -> Result<Reply, PresenceError> {
        let now = clock.now()
        switch request {
        case .hello(let hello):
            let session = SessionID(Token.random(bits: 96))
            let outcome = core.hello(hello, session: session, connection: connection, now: now)
            publish(outcome.updates)
            return outcome.reply.map(Reply.hello)
        case .heartbeat(let session):
            return core.heartbeat(session: session, connection: connection, now: now).reply.map { .done }
        case .status(let session, let status, let text):
            let outcome = core.setStatus(
                session: session, status: status, text: text, connection: connection, now: now)
            publish(outcome.updates)
            return outcome.reply.map { .done }
        case .bye(let session):
            let outcome = core.bye(session: session, now: now)
            publish(outcome.updates)
            return outcome.reply.map { .done }
        case .query(let users):
            return core.query(users, now: now).map(Reply.query)
        case .ping:
            return .success(
                .ping(
                    BrokerInfo(
                        broker: configuration.brokerID, version: rollCallVersion, epoch: epoch, time: now,
                        testMode: configuration.testMode)))
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
        case .group(let group, let edit):
            // Group messages go out from the loop's flush, batched; the reply answers at once.
            return core.group(group, edit, now: now).map(Reply.group)
        case .ungroup(let group):
            let deletion = core.ungroup(group, now: now)
            if let deletion {
                publish(deletion)
                logger.debug("group deleted", metadata: ["group": "\(group)"])
            }
            return .success(.ungroup(deleted: deletion != nil))
        }
    }
}
