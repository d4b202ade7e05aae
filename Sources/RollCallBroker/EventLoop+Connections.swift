import Logging
import RollCallCore
import ZeroMQ

/// The loop's side of the connection tracking (see ``ConnectionTracker``): reading the socket monitor, asking the
/// tracker about requests, and ending the sessions of connections that closed.
extension EventLoop {
    /// Reads every pending connection event.
    func handleConnectionEvents() throws {
        while let event = try sockets.monitor.receiveMonitorEvent() {
            let closed: [ConnectionTracker.Connection]
            switch event.kind {
            case .accepted:
                closed = connections.apply(.accepted(descriptor: event.value))
                if connections.count > configuration.maxConnections { refuse(event) }
            case .disconnected:
                closed = connections.apply(.disconnected(descriptor: event.value))
                // libzmq frees the connection's pipes (and any unread replies or unfinished message in them) just
                // after this event; a second later (or when the loop is next quiet, at most 10 s after that), the
                // broker hands free memory back to the system.
                schedule.connectionClosed(now: clock.now())
            default:
                continue
            }
            for connection in closed { close(connection) }
        }
    }

    /// The connection a request came on, from its source descriptor and routing id: at once when the tracker
    /// knows them together, else after the pending connection events are read.
    func origin(descriptor: Int32, routingID: [UInt8], userID: String?) throws -> RequestOrigin {
        if let known = connections.knownOrigin(descriptor: descriptor, routingID: routingID) { return known }
        try handleConnectionEvents()
        return connections.origin(descriptor: descriptor, routingID: routingID, userID: userID)
    }

    /// Closes a connection past `--max-connections` at once: it has sent nothing yet, so it holds no session; its
    /// DISCONNECTED follows and the tracker forgets it. Said once every 10 s at most.
    private func refuse(_ event: MonitorEvent) {
        event.shutDownConnection()
        metrics.refusedConnection()
        let now = clock.now()
        if refusalWarnings.allows(now: now) {
            logger.warning(
                "connection refused: the broker holds its maximum of connections",
                metadata: ["max": "\(configuration.maxConnections)"])
        }
    }

    /// Ends the sessions of a connection that closed, after its queued edits and bye (EventLoop+Fairness.swift).
    private func close(_ connection: ConnectionTracker.Connection) {
        if let routingID = connection.routingID { finishDeferredWork(.router(routingID)) }
        let users = machine.connectionClosed(connection.id, now: clock.now())
        carryOutEffects()
        if users > 0 {
            logger.debug("connection closed", metadata: ["connection": "\(connection.id)", "users": "\(users)"])
        }
    }
}
