import RollCallCore

/// The one fair queue of both doors' expensive requests (docs/reliability.md).
///
/// A page of a large group or a query of many users costs the loop up to a reply of `maxReplyBytes` to build, so the
/// loop answers cheap requests as it reads them and puts expensive ones here, per connection (Machine/FairQueue.swift),
/// whose turns it takes one connection after the other for at most ``slice`` per round. A connection that waits for an
/// expensive answer has its later requests queued behind it, so each connection's replies keep the order of its
/// requests (docs/protocol.md §3.2). WebSocket reads wait in the same queue, so the bound holds whatever door the work
/// came through.
final class RequestQueue {
    private var queue = FairQueue<FairnessKey, DeferredWork>()

    /// The most time one round spends on queued expensive requests before it reads the sockets again.
    static let slice: Duration = .milliseconds(5)
    /// The request bytes the queue may hold; past it the loop stops reading the ROUTER until it drains, and libzmq's
    /// receive high-water mark holds further requests back.
    static let maxBytes = 8 * 1_048_576

    /// Whether anything waits for a turn.
    var isEmpty: Bool { queue.isEmpty }
    /// Whether the queue holds its most bytes.
    var isFull: Bool { queue.bytes >= Self.maxBytes }

    /// Answers `work` at once (`answer`), or queues it, as its body, when it is expensive or its connection already
    /// waits.
    func take(
        _ work: RequestWork, body: [UInt8], key: FairnessKey, route: ReplyRoute,
        answer: (RequestWork, ReplyRoute) -> Bool
    ) {
        let expensive = work.isExpensive
        guard expensive || queue.isWaiting(key) else {
            _ = answer(work, route)  // a reply that waits for etcd holds the key itself
            return
        }
        let queued = work.queued(body: body)
        queue.append(
            DeferredWork(work: queued, route: route, expensive: expensive), for: key, expensive: expensive,
            bytes: queued.bytes)
    }

    /// Takes turns, one expensive request (and the cheap ones queued behind it) per connection per turn, until the
    /// queue is empty or the slice is used up. A request handed to the log's reader holds its connection, with the
    /// rest of its turn, until ``release(_:)``; one that found the reader full also waits, and its key goes to `full`;
    /// one that waits for the log's commit (``TurnOutcome/waitsForLog``) waits too, and is released by the loop.
    func takeTurns(_ run: (DeferredWork) -> TurnOutcome, full: (FairnessKey) -> Void) {
        let start = ContinuousClock.now
        while let turn = queue.nextTurn() {
            for (index, item) in turn.items.enumerated() {
                let outcome = run(item)
                if outcome == .done { continue }
                let rest = turn.items[(outcome == .reading ? index + 1 : index)...]
                queue.hold(turn.key, rest: rest.map { ($0, $0.expensive, $0.work.bytes) })
                if outcome == .full { full(turn.key) }
                break
            }
            if ContinuousClock.now - start >= Self.slice { return }
        }
    }

    /// Holds a connection whose reply waits (for etcd): its later requests queue behind it until ``release(_:)``.
    func hold(_ key: FairnessKey) { queue.hold(key) }

    /// Lets a held connection take turns again.
    func release(_ key: FairnessKey) { queue.release(key) }

    /// Takes out what a closed connection had queued: the requests that change something, to run before its close
    /// is handled (a `bye` queued behind a group read still counts as a bye, docs/protocol.md §10.4). Its reads are
    /// dropped: nobody can read their replies.
    func removeAll(for key: FairnessKey, limits: PresenceCore.Configuration) -> [DeferredWork] {
        queue.removeAll(for: key).filter { $0.work.decoded(limits: limits).isWrite }
    }
}
