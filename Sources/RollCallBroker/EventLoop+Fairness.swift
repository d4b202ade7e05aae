import RollCallCore
import RollCallSecurity
import RollCallWire

/// Fairness between cheap and expensive requests.
///
/// libzmq's ROUTER already reads one message from each connection in turn, but a turn can be expensive: a page of a
/// large group or a query of many users costs the loop up to a reply of `maxReplyBytes` to build, so that many
/// connections each keeping one such read in flight would delay everybody's heartbeats by their number times that
/// cost. So the loop answers cheap requests as it reads them, and puts expensive ones in a queue per connection,
/// which it works through in turns, one connection after the other, for at most ``expensiveSlice`` per loop round
/// before it reads the ROUTER again. A connection that waits for an expensive answer has its later requests queued
/// behind it, so each connection's replies still come in the order of its requests (docs/protocol.md §3.2).
///
/// One queue serves every door: a WebSocket connection's expensive reads wait their turn in it beside the ROUTER's,
/// so the bound holds whatever transport the work came through (docs/reliability.md).
extension EventLoop {
    /// Whose turn a queue is: a command connection, by its routing id, or a WebSocket connection.
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

    /// What answering a request takes.
    enum Work {
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

        /// Whether the reply can be large: a group (a page of members) or a query of many users.
        var isExpensive: Bool {
            switch self {
            case .request(let envelope, _, _, _), .gateway(.success(.request(let envelope))):
                envelope.request.isExpensive
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
    }

    struct DeferredWork {
        var work: Work
        var route: ReplyRoute
        var expensive: Bool
    }

    /// The most time one loop round spends on queued expensive requests before it reads the ROUTER again.
    static let expensiveSlice: Duration = .milliseconds(5)
    /// The request bytes the queues may hold; past it the loop stops reading the ROUTER until they drain, and
    /// libzmq's receive high-water mark holds further requests back.
    static let maxDeferredBytes = 8 * 1_048_576

    /// Queues work for the connection `key`, a ROUTER request as its body.
    func enqueue(_ work: Work, body: [UInt8], key: FairnessKey, route: ReplyRoute) {
        var item = DeferredWork(work: work, route: route, expensive: work.isExpensive)
        if case .request(_, let connection, let userID, _) = work {
            item.work = .queued(body: body, connection: connection, userID: userID)
        }
        deferred.append(item, for: key, expensive: item.expensive, bytes: item.work.bytes)
    }

    /// Whether queued work waits.
    var hasDeferredWork: Bool { !deferred.isEmpty }

    /// Works through the queues, one expensive request (and the cheap ones queued behind it) per connection per
    /// turn (FairQueue.swift), until they are empty or the slice is used up. A read of the log goes to the reader
    /// thread: its connection is held, the rest of its turn behind the read, until the reply (EventLoop+History.swift).
    func handleDeferredWork() {
        let start = ContinuousClock.now
        while let turn = deferred.nextTurn() {
            for (index, item) in turn.items.enumerated() {
                let started = takeTurn(item.work, route: item.route)
                if started == .done { continue }
                let rest = turn.items[(started == .reading ? index + 1 : index)...]
                deferred.hold(turn.key, rest: rest.map { ($0, $0.expensive, $0.work.bytes) })
                if started == .full { history?.slots.park(turn.key) }
                break
            }
            if ContinuousClock.now - start >= Self.expensiveSlice { return }
        }
    }

    /// Runs the queued requests of a connection that closed, before its close is handled: the broker reads a
    /// connection's requests before its close (docs/protocol.md §10.4), so a `bye` queued behind a group read
    /// still counts as a bye, and a queued group edit still applies. Queued reads are dropped: nobody can read
    /// their replies, and running them at once would hold up the loop.
    func finishDeferredWork(_ key: FairnessKey) {
        for item in deferred.removeAll(for: key) {
            switch item.work {
            case .queued(let body, let connection, let userID):
                guard case .success(let envelope) = Codec.decodeRequest(body, limits: configuration.presence),
                    !envelope.request.isRead
                else { continue }
                answer(
                    .request(envelope, connection: connection, userID: userID, bytes: body.count), route: item.route)
            case .gateway(.success(.request(let envelope))) where !envelope.request.isRead:
                answer(item.work, route: item.route)
            default:
                continue
            }
        }
    }
}
