import Logging
import RollCallCore
import RollCallSecurity
import RollCallStore
import RollCallWire

/// The loop's side of the store (SQLite on the `StoreWriter` thread) and of the presence log (docs/history.md): it
/// hands changes and transitions to the writer, and prepares the reads `history`, `events` and `query` with `at` for
/// the reader thread (LogRead.swift, LogReader.swift). A WebSocket `subscribe` with `after` still reads the file on the
/// loop.
final class StoreSide {
    private let writer: StoreWriter
    /// The presence log, when the broker keeps one.
    private(set) var history: LoopHistory?
    /// Connections whose read waits until the log is out through an offset (``ReadStart/waitsForLog``).
    private var logWaiters: [(key: FairnessKey, through: UInt64)] = []
    /// Connections whose read waited and may go now, with the offset it waited for: the read, taken again, waits for
    /// no later transitions (under a steady stream of changes it would wait for ever).
    private var caughtUp: [FairnessKey: UInt64] = [:]
    private let logger: Logger
    /// Whether the store keeps the presence log alone (a node of a cluster, whose state is etcd's).
    private let logsOnly: Bool

    /// Loads the kept state into `core`; starts the writer, and the log's reader when the broker keeps a log. Returns
    /// the side and the broker time the kept state ends at.
    static func open(
        _ store: any PresenceStore, core: inout PresenceCore, configuration: BrokerConfiguration, keepsLog: Bool,
        inCluster: Bool, logger: Logger, clock: (BrokerTime?) -> BrokerClock, wakeLoop: @escaping @Sendable () -> Void,
        logCommitted: @escaping @Sendable (UInt64) -> Void, logRestarted: @escaping @Sendable (String) -> Void
    ) throws -> (StoreSide, BrokerClock) {
        let kept = try store.load()
        let clock = clock(kept.brokerTime)
        if inCluster {
            // The cluster's state is etcd's: a node's data directory keeps its presence log alone (and its clock).
            core.tracksChanges = false
        } else {
            Self.restore(kept, into: &core, now: clock.now(), configuration: configuration, logger: logger)
        }
        var history: LoopHistory?
        if let (state, log) = try store.openLog(keep: keepsLog), keepsLog {
            // A node of a cluster numbers transitions by etcd's history, in the cluster's view (LoopStart.swift).
            if !inCluster { core.startLog(after: state.lastOffset) }
            let reader = LogReader(log: try log.readOnlyConnection(), beforeRead: configuration.logReadHook)
            history = LoopHistory(log: log, epoch: state.epoch, reader: reader)
            logger.info(
                "presence log kept", metadata: ["log_epoch": "\(state.epoch)", "offset": "\(state.lastOffset)"])
        }
        let writer = StoreWriter(
            store: store, logger: logger,
            logRetention: history == nil ? nil : configuration.historyRetentionMilliseconds,
            committedOffset: core.logOffset, wakeLoop: wakeLoop, logCommitted: logCommitted,
            logRestarted: logRestarted,
            writeSpacing: configuration.publishesBeforeCommit
                ? StoreWriter.relaxedWriteSpacing : StoreWriter.writeSpacing)
        return (StoreSide(writer: writer, history: history, logsOnly: inCluster, logger: logger), clock)
    }

    /// Loads a single broker's kept state into `core`, and says what it found.
    private static func restore(
        _ kept: StoredState, into core: inout PresenceCore, now: BrokerTime, configuration: BrokerConfiguration,
        logger: Logger
    ) {
        core.restore(records: kept.records, groups: kept.groups, now: now)
        core.restorePrivacy(kept.privacy)
        if core.hasPrivacySettings, !configuration.identifiesViewers {
            // Without keys or tokens every peer is an operator and sees the truth (docs/privacy.md).
            logger.warning(
                "privacy settings are kept but have no effect: no CURVE keys or WebSocket tokens are configured",
                metadata: ["users": "\(kept.privacy.count)"])
        }
        logger.info(
            "state restored",
            metadata: [
                "users": "\(kept.records.count)", "available": "\(core.availableUserCount)",
                "groups": "\(kept.groups.count)", "skipped": "\(kept.skippedRows)",
            ])
    }

    private init(writer: StoreWriter, history: LoopHistory?, logsOnly: Bool, logger: Logger) {
        self.writer = writer
        self.history = history
        self.logsOnly = logsOnly
        self.logger = logger
    }

    /// The log's epoch, when the broker keeps one.
    var logEpoch: String? { history?.epoch }

    /// The highest offset the log's writer has committed, or ``UInt64/max`` while it cannot write (publications then
    /// wait for nothing: Machine/PublicationHold.swift).
    var logged: UInt64 { writer.isFailing ? .max : writer.committedOffset }

    /// Whether the writer wakes the loop after each commit (or failure): publications wait for it.
    func wakeLoopAfterCommits(_ wake: Bool) { writer.wakesLoopAfterCommits(wake) }

    /// Hands this round's transitions to the writer and waits, at most `timeout`, until it has committed them or
    /// failed: test mode's `advance` answers once what it published is out (docs/protocol.md).
    func waitForLog(machine: inout BrokerMachine, now: BrokerTime, timeout: Duration) {
        guard history != nil else { return }
        writeTransitions(from: &machine, now: now)
        writer.waitForCommit(through: machine.logOffset, timeout: timeout)
    }

    /// Stops the log's reader: a read in flight is dropped.
    func stopReading() { history?.reader?.stop() }

    // MARK: Writing

    /// Once per write interval (`due`), the changes since the last batch; every round, the new transitions: they are
    /// what a crash must not lose. A database file made anew first gets the whole state.
    func write(from machine: inout BrokerMachine, now: BrokerTime, due: (Bool) -> Bool) {
        if writer.takeSnapshotRequest(), !logsOnly { writer.enqueue(Self.everything(of: &machine.core, now: now)) }
        if due(machine.core.hasChanges) {
            var batch = Self.batch(of: &machine.core, now: now)
            take(from: &machine, into: &batch)
            writer.enqueue(batch)
        }
        writeTransitions(from: &machine, now: now)
    }

    /// Hands the last changes to the writer and waits for them; whether everything is stored.
    func finish(from machine: inout BrokerMachine, now: BrokerTime) -> Bool {
        var batch = Self.batch(of: &machine.core, now: now)
        take(from: &machine, into: &batch)
        writer.enqueue(batch)
        return writer.finish()
    }

    /// Hands this round's transitions to the writer, when the broker keeps a log.
    func writeTransitions(from machine: inout BrokerMachine, now: BrokerTime) {
        guard history != nil else { return }
        writer.note(time: now)
        history?.forget(through: writer.committedOffset)
        // The writer drops the oldest past the same bound while the store cannot write (and the log then starts over).
        history?.dropUnwritten(past: writer.maxUnwrittenLog, committed: writer.committedOffset)
        var batch = StoreBatch(brokerTime: now)
        take(from: &machine, into: &batch)
        writer.enqueue(batch)
    }

    /// The log started over under `epoch` (the writer dropped transitions while the store could not write): cursors
    /// of the old epoch are refused from now on.
    func restartLog(epoch: String) { history?.restart(epoch: epoch) }

    /// Takes the machine's new transitions into `batch`, keeping them for reads until the writer has written them,
    /// with what the log must do along with them (a cluster's epoch, a floor), which holds for reads at once. The
    /// caller hands the batch to the writer: taken and not written, they would be lost from the log.
    private func take(from machine: inout BrokerMachine, into batch: inout StoreBatch) {
        guard history != nil else { return }
        let (control, entries) = machine.takeLog()
        if let start = control.start {
            batch.logStart = start
            if history?.epoch != start.epoch {
                history?.restart(epoch: start.epoch)
                history?.raiseFloor(through: start.floor)
            }
        }
        if let floor = control.floor {
            batch.logFloor = floor
            history?.raiseFloor(through: floor.through)
        }
        history?.unwritten.append(contentsOf: entries)
        batch.log += entries
    }

    /// The changes since the last batch, for the store.
    private static func batch(of core: inout PresenceCore, now: BrokerTime) -> StoreBatch {
        let changes = core.takeChanges(now: now)
        return StoreBatch(
            records: changes.records, groups: changes.groups, deletedGroups: changes.deletedGroups, brokerTime: now,
            privacy: core.takePrivacyChanges())
    }

    /// The whole state as one batch, for a store that starts empty.
    private static func everything(of core: inout PresenceCore, now: BrokerTime) -> StoreBatch {
        let all = core.everything(now: now)
        return StoreBatch(
            records: all.records, groups: all.groups, deletedGroups: [], brokerTime: now,
            privacy: core.allPrivacySettings())
    }

    // MARK: Reading

    /// The answer to a read of the log on a broker that keeps none.
    static let noLog = PresenceError(
        .noHistory, "this broker keeps no presence log (--history-retention-ms 0, or --ephemeral)")

    /// Why a node of a cluster does not read its log now, as it does not answer `query`: it is outside its window
    /// (its log may lag the cluster's), or has not joined yet (its log waits for the cluster's epoch). `nil` on a
    /// single broker.
    static func clusterRefusal(_ machine: BrokerMachine) -> PresenceError? {
        if let refusal = machine.clusterRefusal { return refusal }
        guard machine.logEpoch == nil else { return nil }
        return PresenceError(
            .clusterUnavailable,
            "this node has not joined the cluster yet, and its presence log waits for the cluster's epoch: try another "
                + "node, or again later")
    }

    /// What became of a request that reads the log.
    enum ReadStart {
        /// Answered (or refused) at once.
        case answered(Result<Reply, PresenceError>)
        /// Handed to the reader: the connection's later requests wait for its reply.
        case reading
        /// The reader is at its bound (``LogReadSlots/maxInFlight``): the request waits for a slot.
        case full
        /// Transitions made before it still wait for the log: the request waits until they are out
        /// (``readersCaughtUp(visible:)``).
        case waitsForLog
    }

    /// Starts an authorized read of the log, after this round's transitions went to the writer: what the loop alone
    /// knows is taken now (everything published so far is in the file or in `unwritten`; `committed` is read before
    /// the file, so rows above it come from `unwritten`: no hole), the file is read on the reader thread, and `done`
    /// gets the rows there.
    func startRead(
        _ request: Request, key: FairnessKey, viewer: UserID?, machine: inout BrokerMachine, now: BrokerTime,
        done: @escaping @Sendable (LogRead, Result<LogRead.Rows, any Error>) -> Void
    ) -> ReadStart {
        writeTransitions(from: &machine, now: now)
        guard let history, let reader = history.reader else { return .answered(.failure(Self.noLog)) }
        if let refusal = Self.clusterRefusal(machine) { return .answered(.failure(refusal)) }
        let visible = machine.visibleLogOffset
        // A read shows every transition made before it (its connection's own acknowledged changes included), and
        // only once they are out: it waits for the log's commit, a millisecond or so.
        let made = caughtUp.removeValue(forKey: key) ?? machine.logOffset
        if visible < made {
            logWaiters.append((key, made))
            return .waitsForLog
        }
        let read: LogRead
        switch LogRead.prepare(
            request, history: history, committed: min(writer.committedOffset, visible), logOffset: visible, now: now,
            viewer: viewer, core: machine.published)
        {
        case .success(let prepared): read = prepared
        case .failure(let refusal): return .answered(.failure(refusal))
        }
        guard self.history?.slots.take() == true else { return .full }
        reader.submit({ log in try read.fetch(from: log) }) { rows in done(read, rows) }
        return .reading
    }

    /// The connections whose reads waited for the log and may go on now that it is out through `visible`.
    func readersCaughtUp(visible: UInt64) -> [FairnessKey] {
        guard !logWaiters.isEmpty else { return [] }
        let ready = logWaiters.filter { $0.through <= visible }
        logWaiters.removeAll { $0.through <= visible }
        for waiter in ready { caughtUp[waiter.key] = waiter.through }
        return ready.map(\.key)
    }

    /// A connection closed: its read, waiting or not, is dropped (RequestQueue.removeAll).
    func forgetReads(of key: FairnessKey) {
        guard !logWaiters.isEmpty || !caughtUp.isEmpty else { return }
        logWaiters.removeAll { $0.key == key }
        caughtUp[key] = nil
    }

    /// The connection `key` waits for a slot of the reader.
    func park(_ key: FairnessKey) { history?.slots.park(key) }

    /// A read is back: its slot is free, and the connections that waited for one may go on.
    func readFinished() -> [FairnessKey] { history?.slots.give() ?? [] }

    /// A read's reply from its rows, privacy judged with `published` as it is now.
    func reply(
        to read: LogRead, _ rows: Result<LogRead.Rows, any Error>, published: PresenceCore, now: BrokerTime
    ) -> Result<Reply, PresenceError> {
        switch rows {
        case .success(let rows): return .success(read.reply(rows, core: published, now: now))
        case .failure(let error as PresenceError): return .failure(error)
        case .failure(let error):
            logger.error("reading the presence log failed", metadata: ["error": "\(error)"])
            return .failure(PresenceError(.noHistory, "the presence log cannot be read now: \(error)"))
        }
    }

    /// The answer to a resume on a broker that keeps no log.
    static let noResume = PresenceError(
        .noHistory, "this broker keeps no presence log, so a subscription cannot resume")

    /// What became of a WebSocket resume (`subscribe` with `after`) in its turn.
    enum ResumeStart {
        /// Refused: the log cannot continue from there, or the broker keeps none.
        case refused(PresenceError)
        /// Ready to be read, with a slot of the reader taken and its position pinned (``LoopHistory/beginResume(at:)``):
        /// ``submitResume(_:done:)`` next, whose completion gives both back.
        case ready(LogRead)
        /// As for a read (``ReadStart``).
        case full, waitsForLog
    }

    /// Prepares a resume of `topics` from `after` as ``startRead(_:key:viewer:machine:now:done:)`` prepares a read:
    /// after the transitions made before it are out, with a slot of the reader free. The position is pinned before
    /// this round's transitions go to the writer: the writer may have committed transitions still held for the log
    /// (above the position), which the loop must keep until the resume is answered.
    func prepareResume(
        of topics: [Topic], after: UInt64, logEpoch: String?, key: FairnessKey, machine: inout BrokerMachine,
        now: BrokerTime
    ) -> ResumeStart {
        guard history?.reader != nil else { return .refused(Self.noResume) }
        if let refusal = Self.clusterRefusal(machine) { return .refused(refusal) }
        let visible = machine.visibleLogOffset
        history?.beginResume(at: visible)
        writeTransitions(from: &machine, now: now)
        let made = caughtUp.removeValue(forKey: key) ?? machine.logOffset
        let prepared: ResumeStart
        if let history, visible >= made {
            switch LogRead.prepareResume(
                of: topics, after: after, logEpoch: logEpoch, history: history,
                committed: min(writer.committedOffset, visible), logOffset: visible, now: now)
            {
            case .failure(let refusal): prepared = .refused(refusal)
            case .success(let read): prepared = self.history?.slots.take() == true ? .ready(read) : .full
            }
        } else if history != nil {
            logWaiters.append((key, made))
            prepared = .waitsForLog
        } else {
            prepared = .refused(Self.noResume)
        }
        if case .ready = prepared { return prepared }
        history?.endResume(at: visible)  // not read
        return prepared
    }

    /// Reads a prepared resume on the reader thread; the transitions published meanwhile are kept for
    /// ``finishResume(_:_:machine:now:)``. `done` always comes, also when the reader has stopped.
    func submitResume(_ read: LogRead, done: @escaping @Sendable (Result<LogRead.Rows, any Error>) -> Void) {
        guard let reader = history?.reader, reader.submit({ log in try read.fetch(from: log) }, answer: done) else {
            return done(.failure(PresenceError(.noHistory, "the presence log's reader has stopped")))
        }
    }

    /// The missed transitions of a resume read from the file, with those published since its request that are out
    /// now (later ones reach the new subscription from the publication hold), or why the resume is refused. This
    /// round's transitions go to the history first: one published by a request just before, in the same round, is
    /// out already.
    func finishResume(
        _ read: LogRead, _ rows: Result<LogRead.Rows, any Error>, machine: inout BrokerMachine, now: BrokerTime
    ) -> Result<[LogEntry], PresenceError> {
        guard case .resume(let topics, let after) = read.kind else { return .success([]) }
        writeTransitions(from: &machine, now: now)
        let since = history?.resumed(
            after: read.position.offset, through: machine.visibleLogOffset, topics: topics)
        switch rows {
        case .success(let rows):
            guard let since, let history, history.epoch == read.position.epoch, history.droppedThrough <= after
            else { return .failure(LogRead.droppedTransitions(after: after)) }
            let missed = rows.entries + since
            return missed.count <= HistoryQuery.maxLimit
                ? .success(missed) : .failure(LogRead.tooManyMissed(after: after))
        case .failure(let error as PresenceError): return .failure(error)
        case .failure(let error):
            logger.error("reading the presence log failed", metadata: ["error": "\(error)"])
            return .failure(PresenceError(.noHistory, "the presence log cannot be read now: \(error)"))
        }
    }
}
