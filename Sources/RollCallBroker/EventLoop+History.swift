import RollCallCore
import RollCallSecurity
import RollCallStore
import RollCallWire

/// The loop's glue to the presence log (docs/history.md): it hands transitions to the writer, and prepares the reads
/// `history`, `events` and `query` with `at` for the reader thread and answers them when their rows come back
/// (LogRead.swift, LogReader.swift). A WebSocket `subscribe` with `after` still reads the file on the loop.
extension EventLoop {
    /// What became of a request that reads the log.
    enum ReadStart {
        /// Answered (or refused) at once.
        case done
        /// Handed to the reader: the connection's later requests wait for its reply.
        case reading
        /// The reader is at its bound (``LogReadSlots/maxInFlight``): the request waits for a slot.
        case full
    }

    /// Takes the core's new transitions, keeping them for reads until the writer has written them. The caller hands
    /// them to the writer: taken and not written, they would be lost from the log.
    func takeTransitions() -> [LogEntry] {
        guard history != nil, machine.core.hasTransitions else { return [] }
        let entries = machine.core.takeTransitions()
        history?.unwritten.append(contentsOf: entries)
        return entries
    }

    /// Hands this round's transitions to the writer.
    func writeTransitions(now: BrokerTime) {
        guard let writer else { return }
        writer.note(time: now)
        history?.forget(through: writer.committedOffset)
        // The writer drops the oldest past the same bound while the store cannot write (and the log then starts over).
        if let count = history?.unwritten.count, count > writer.maxUnwrittenLog {
            history?.unwritten.removeFirst(count - writer.maxUnwrittenLog)
        }
        let entries = takeTransitions()
        guard !entries.isEmpty else { return }
        writer.enqueue(StoreBatch(brokerTime: now, log: entries))
    }

    /// The log started over under `epoch` (the writer dropped transitions while the store could not write): cursors
    /// of the old epoch are refused from now on.
    func adoptLog(epoch: String) {
        history?.restart(epoch: epoch)
        machine.logEpoch = epoch
    }

    /// Runs a queued request in its turn (EventLoop+Fairness.swift): a read of the log goes to the reader thread,
    /// anything else is answered at once (EventLoop+Requests.swift).
    func takeTurn(_ work: Work, route: ReplyRoute) -> ReadStart {
        var work = work
        if case .queued(let body, let connection, let userID) = work,
            case .success(let envelope) = Codec.decodeRequest(body, limits: configuration.presence)
        {
            work = .request(envelope, connection: connection, userID: userID, bytes: body.count)
        }
        switch (work, route) {
        case (.request(let envelope, _, let userID, _), .router) where envelope.request.readsLog:
            return startRead(envelope.request, id: envelope.id, access: access(userID: userID), route: route)
        case (.gateway(.success(.request(let envelope))), .webSocket(let id)) where envelope.request.readsLog:
            guard let peer = gateway.peers[id] else { return .done }  // closed meanwhile: nobody reads the answer
            return startRead(envelope.request, id: envelope.id, access: peer.access, route: route)
        default:
            answer(work, route: route)
            return .done
        }
    }

    /// Starts a request that reads the log, after the same authorization as every request: what the loop alone
    /// knows is taken now (everything published so far is in the file or in `unwritten`, handed to the writer here
    /// if this round's were not yet; `committed` is read before the file, so rows above it come from `unwritten`:
    /// no hole), the file is read on the reader thread, and ``finishRead`` replies on `route`.
    func startRead(_ request: Request, id: JSON?, access: Access, route: ReplyRoute) -> ReadStart {
        if let refusal = Authorization.refusal(of: request, by: access, owner: { _ in nil }) {
            replyToRead(request, id: id, .failure(refusal), route: route)
            return .done
        }
        if history != nil { writeTransitions(now: clock.now()) }
        guard let history, let writer, let reader = history.reader else {
            let reason = "this broker keeps no presence log (--history-retention-ms 0, --ephemeral, or a cluster node)"
            replyToRead(request, id: id, .failure(PresenceError(.noHistory, reason)), route: route)
            return .done
        }
        let prepared = LogRead.prepare(
            request, history: history, committed: writer.committedOffset, logOffset: machine.core.logOffset,
            now: clock.now(), viewer: access.viewer, core: machine.published)
        let read: LogRead
        switch prepared {
        case .success(let prepared): read = prepared
        case .failure(let refusal):
            replyToRead(request, id: id, .failure(refusal), route: route)
            return .done
        }
        guard self.history?.slots.take() == true else { return .full }
        let mailbox = mailbox
        reader.submit({ log in try read.fetch(from: log) }) { rows in
            mailbox.post { loop in loop.finishRead(read, rows, request: request, id: id, route: route) }
        }
        return .reading
    }

    /// A read's rows are back: the reply goes out (privacy judged now, with the core as it is), the connection's
    /// later requests take turns again, and so do connections that waited for a slot.
    func finishRead(
        _ read: LogRead, _ rows: Result<LogRead.Rows, any Error>, request: Request, id: JSON?, route: ReplyRoute
    ) {
        for parked in history?.slots.give() ?? [] { deferred.release(parked) }
        deferred.release(route.key)
        let result: Result<Reply, PresenceError>
        switch rows {
        case .success(let rows): result = .success(read.reply(rows, core: machine.published, now: clock.now()))
        case .failure(let error as PresenceError): result = .failure(error)
        case .failure(let error):
            logger.error("reading the presence log failed", metadata: ["error": "\(error)"])
            result = .failure(PresenceError(.noHistory, "the presence log cannot be read now: \(error)"))
        }
        replyToRead(request, id: id, result, route: route)
    }

    /// Counts a read's outcome and sends its reply where it goes (a connection closed meanwhile gets nothing).
    private func replyToRead(_ request: Request, id: JSON?, _ result: Result<Reply, PresenceError>, route: ReplyRoute) {
        metrics.request(request, failed: result.failureCode)
        let reply = Codec.encodeReply(id: id, result, maxBytes: configuration.maxReplyBytes)
        guard case .webSocket(let connection) = route else { return answer(.answer(reply), route: route) }
        deliver(reply, to: connection)
        gateway.peers[connection]?.outbox.requestDone()
    }

    /// A WebSocket `subscribe` with `after`: the transitions of the presence topics after that offset go out after
    /// the reply, in offset order, then the live ones; nothing in between can come first, as all of it happens in
    /// this one call on the loop. Refused (and nothing subscribed) when the log cannot continue from `after`, or
    /// when more than a page (``HistoryQuery/maxLimit``) was missed: then query and subscribe again.
    func resume(_ id: ConnectionID, to topics: [Topic], after: UInt64, logEpoch: String?, requestID: JSON?) {
        switch missedTransitions(of: topics, after: after, logEpoch: logEpoch) {
        case .success(let missed):
            subscribe(id, to: topics, requestID: requestID, missed: missed)
        case .failure(let error):
            metrics.request(nil, failed: error.code)
            deliver(Codec.encodeReply(id: requestID, .failure(error)), to: id)
        }
    }

    private func missedTransitions(of topics: [Topic], after: UInt64, logEpoch: String?) -> Result<
        [LogEntry], PresenceError
    > {
        guard self.history != nil, let writer else {
            return .failure(
                PresenceError(.noHistory, "this broker keeps no presence log, so a subscription cannot resume"))
        }
        // This round's transitions join `unwritten` first: a copy of the history taken before would miss them.
        writeTransitions(now: clock.now())
        guard let history else { return .success([]) }
        do {
            return .success(
                try LogRead.missed(
                    of: topics, after: after, logEpoch: logEpoch, history: history,
                    committed: writer.committedOffset, logOffset: machine.core.logOffset))
        } catch let error as PresenceError {
            return .failure(error)
        } catch {
            logger.error("reading the presence log failed", metadata: ["error": "\(error)"])
            return .failure(PresenceError(.noHistory, "the presence log cannot be read now: \(error)"))
        }
    }
}
