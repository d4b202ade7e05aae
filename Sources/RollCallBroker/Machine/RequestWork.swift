import RollCallCore
import RollCallWire

/// Whose turn a queue of the one fair queue is (EventLoop+Requests.swift): a command connection, by its routing id,
/// or a WebSocket connection.
enum FairnessKey: Hashable {
    case router([UInt8])
    case webSocket(ConnectionID)
}

/// Where a reply goes: on the ROUTER with its envelope, or to a WebSocket connection.
enum ReplyRoute: Sendable {
    case router(envelope: [[UInt8]])
    case webSocket(ConnectionID)

    /// The queue of the connection the reply goes to (its routing id is the envelope's first frame).
    var key: FairnessKey {
        switch self {
        case .router(let envelope): .router(envelope.first ?? [])
        case .webSocket(let id): .webSocket(id)
        }
    }
}

/// What answering one request takes.
enum RequestWork {
    /// The answer is ready (a framing error or a rejected request).
    case answer([UInt8])
    /// A request to run, from a connection, with the `User-Id` of its key (CURVE: what the key may do is looked
    /// up when it runs, so that a queued request meets a reload), and the size of its body.
    case request(RequestEnvelope, connection: ConnectionID?, userID: String?, bytes: Int)
    /// A request body to decode and run when its turn comes: queued requests are kept as they came, since a
    /// decoded list of users takes several times the bytes of its JSON.
    case queued(body: [UInt8], connection: ConnectionID?, userID: String?)
    /// A frame of a WebSocket connection, decoded by the gateway; what its token allows is looked up when it runs.
    case gateway(Result<GatewayRequest, RequestRejection>)

    /// Whether the reply can be large: a group (a page of members) or a query of many users; or it reads the log on
    /// the reader thread: a WebSocket resume (`subscribe` with `after`).
    var isExpensive: Bool {
        switch self {
        case .request(let envelope, _, _, _), .gateway(.success(.request(let envelope))):
            envelope.request.isExpensive
        case .gateway(.success(.subscribe(_, _, let after, _))): after != nil
        default: false
        }
    }

    /// Whether it is a request that changes something (not a read, nor a ready answer).
    var isWrite: Bool {
        switch self {
        case .request(let envelope, _, _, _), .gateway(.success(.request(let envelope))): !envelope.request.isRead
        default: false
        }
    }

    /// What it holds in the queue. A WebSocket frame counts nothing here: the gateway bounds what each
    /// connection has in the loop (``GatewayOutbox/maxInFlight``).
    var bytes: Int {
        switch self {
        case .answer(let reply): reply.count
        case .request(_, _, _, let bytes): bytes
        case .queued(let body, _, _): body.count
        case .gateway: 0
        }
    }

    /// The work as it waits in the queue: a request as its body (`body`), decoded again in its turn.
    func queued(body: [UInt8]) -> RequestWork {
        guard case .request(_, let connection, let userID, _) = self else { return self }
        return .queued(body: body, connection: connection, userID: userID)
    }

    /// A queued body decoded again for its turn; anything else as it is. The same bytes decode the same way.
    func decoded(limits: PresenceCore.Configuration) -> RequestWork {
        guard case .queued(let body, let connection, let userID) = self else { return self }
        switch Codec.decodeRequest(body, limits: limits) {
        case .success(let envelope):
            return .request(envelope, connection: connection, userID: userID, bytes: body.count)
        case .failure(let rejection): return .answer(Codec.encodeReply(id: rejection.id, .failure(rejection.error)))
        }
    }
}

/// One piece of work in the fair queue, with where its reply goes.
struct DeferredWork {
    var work: RequestWork
    var route: ReplyRoute
    var expensive: Bool
}

/// What became of a queued request in its turn.
enum TurnOutcome {
    /// Answered.
    case done
    /// Handed to the log's reader: the connection's later requests wait for its reply.
    case reading
    /// The reader is at its bound: the request waits for a slot.
    case full
    /// Transitions made before the read are still held for the log (PublicationHold.swift): the read waits until
    /// they are out, so that it shows what its connection was answered before it, and nothing a crash could lose.
    case waitsForLog
}
