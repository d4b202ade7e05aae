import Logging
import RollCallCore
import RollCallStore

/// The broker's state as the loop starts: the kept state loaded into the core (StoreSide.swift), the clock, which
/// starts no earlier than the kept state's time, the machine that decides on it, and the contacts file on top.
struct LoopStart {
    var machine: BrokerMachine
    var clock: BrokerClock
    /// The heartbeat, store and trim timers, from the clock's start.
    var schedule: LoopSchedule
    var store: StoreSide?

    /// Loads the state; throws if the store or the contacts file cannot be read. `mailbox` wakes the loop for the
    /// store writer, and takes a new log epoch to the loop.
    static func load(
        configuration: BrokerConfiguration, epoch: String, store: (any PresenceStore)?, inCluster: ClusterSettings?,
        contacts: (path: String, lists: [ContactList])?, logger: Logger, mailbox: LoopMailbox,
        logCommitted: @escaping @Sendable (UInt64) -> Void
    ) throws -> LoopStart {
        var core = PresenceCore(configuration: configuration.presence)
        let clock: BrokerClock
        var side: StoreSide?
        if let store {
            (side, clock) = try StoreSide.open(
                store, core: &core, configuration: configuration,
                keepsLog: configuration.historyRetentionMilliseconds > 0, inCluster: inCluster != nil, logger: logger,
                clock: { BrokerClock(floor: $0, manual: configuration.testMode) }, wakeLoop: { mailbox.wake() },
                logCommitted: logCommitted,
                logRestarted: { epoch in
                    // The writer dropped transitions while the store could not write: the log started over, and
                    // cursors of the old epoch are refused from now on.
                    mailbox.post { loop in
                        loop.store?.restartLog(epoch: epoch)
                        loop.machine.logEpoch = epoch
                    }
                })
        } else {
            clock = BrokerClock(manual: configuration.testMode)
            core.tracksChanges = false  // nothing will take them
        }
        var machine = BrokerMachine(
            configuration: configuration, epoch: epoch, core: core,
            publishing: inCluster.map { .cluster(ClusterSide(nodeID: $0.nodeID, presence: configuration.presence)) }
                ?? .local,
            logsSessionSteps: logger.logLevel <= .debug)
        machine.logEpoch = side?.logEpoch
        if side?.logEpoch != nil, inCluster != nil {
            // A node of a cluster numbers transitions by etcd's history, in the cluster's view, under the cluster's
            // epoch, which it learns as it joins (docs/history.md, "On a cluster").
            machine.withPublished { $0.startLog(after: 0) }
            machine.logEpoch = nil
        }
        if side?.logEpoch != nil, !configuration.publishesBeforeCommit {
            machine.hold = PublicationHold(logged: machine.logOffset)
        }
        if let contacts {
            // After the kept state: the file wins for the users it lists. Nobody is subscribed yet, so the views
            // it changes reach no one.
            let started = ContinuousClock.now
            if case .failure(let refusal) = machine.loadContacts(contacts.lists, now: clock.now()) {
                throw BrokerError.contactsFile(
                    ContactsFileError(path: contacts.path, line: nil, reason: refusal.message))
            }
            machine.effects.removeAll()
            logger.info(
                "contacts file loaded",
                metadata: [
                    "file": "\(contacts.path)", "users": "\(contacts.lists.count)",
                    "ms": "\((ContinuousClock.now - started).wholeMilliseconds)",
                ])
        }
        let schedule = LoopSchedule(
            heartbeatMilliseconds: configuration.brokerHeartbeatMilliseconds,
            writeIntervalMilliseconds: configuration.writeIntervalMilliseconds, start: clock.now())
        return LoopStart(machine: machine, clock: clock, schedule: schedule, store: side)
    }
}
