import Logging
import RollCallCore
import ZeroMQ

/// Where a request came from.
enum RequestOrigin {
    /// A live connection.
    case connection(ConnectionID)
    /// A transport without descriptors (such as inproc): not tracked, sessions rely on their TTL.
    case untracked
    /// A connection that has closed: nobody can read the reply, and its sessions are already dealt with.
    case closed
}

struct TrackedConnection {
    var id: ConnectionID
    /// The routing id its requests carry, once one arrived.
    var routingID: [UInt8]?
}

/// Which connection a request came on, and when a connection closes.
///
/// libzmq 4.3.4 has no ROUTER_NOTIFY, so the loop watches the ROUTER's socket monitor, started before the socket
/// binds so that it sees every connection: ACCEPTED and DISCONNECTED events name the connection's file descriptor,
/// and `ZMQ_SRCFD` names the descriptor a request came on. Descriptors are reused by the kernel, so each accepted
/// connection gets a fresh ``ConnectionID``, and a request whose descriptor and routing id are not known together
/// is only credited after the pending events are read: libzmq queues a connection's DISCONNECTED before it closes
/// the descriptor, and a new connection's ACCEPTED before its first message. The core fences sessions by
/// connection id, so the close of an old connection never ends a session that has moved on.
extension EventLoop {
    /// How many routing ids of closed connections are remembered, to recognise their late messages.
    static let closedRoutingIDMemory = 65_536

    /// How long after a connection closes the broker gives freed memory back to the system.
    static let trimDelayMilliseconds: Int64 = 1_000
    /// How long the trim may wait for a round without requests, after it is due.
    static let trimPostponeMilliseconds: Int64 = 10_000

    /// Reads every pending connection event.
    func handleConnectionEvents() throws {
        while let event = try monitor.receiveMonitorEvent() {
            switch event.kind {
            case .accepted:
                // A descriptor still mapped means we missed its DISCONNECTED: it closed before the kernel reused it.
                if let stale = connectionsByDescriptor[event.value] { close(stale) }
                connectionsByDescriptor[event.value] = TrackedConnection(id: newConnection())
            case .disconnected:
                if let known = connectionsByDescriptor.removeValue(forKey: event.value) { close(known) }
                // libzmq frees the connection's pipes (and any unread replies or unfinished message in them) just
                // after this event; a second later (or when the loop is next quiet, at most 10 s after that), the
                // broker hands free memory back to the system.
                if trimAt == nil { trimAt = clock.now() + Self.trimDelayMilliseconds }
            default:
                break
            }
        }
    }

    /// The connection a request came on, from its source descriptor and routing id.
    ///
    /// A routing id that libzmq made (five bytes, the first zero) names one connection for the socket's whole life.
    /// So a request whose descriptor and generated routing id are already known together comes from that
    /// connection and needs no look at the monitor, which saves a system call per request; a generated id of a
    /// closed connection marks a late message of it. Any other request first reads the pending events.
    func origin(descriptor: Int32, routingID: [UInt8]) throws -> RequestOrigin {
        guard descriptor >= 0 else { return .untracked }
        let generated = routingID.count == 5 && routingID[0] == 0
        if generated, let known = connectionsByDescriptor[descriptor], known.routingID == routingID {
            return .connection(known.id)
        }
        try handleConnectionEvents()
        if generated && closedRoutingIDs.contains(routingID) { return .closed }
        // The monitor has seen every connection, so a descriptor it does not know has closed.
        guard var known = connectionsByDescriptor[descriptor] else { return .closed }
        if let bound = known.routingID, bound != routingID { return .closed }  // an older connection's message
        known.routingID = routingID
        connectionsByDescriptor[descriptor] = known
        return .connection(known.id)
    }

    private func newConnection() -> ConnectionID {
        connectionCount += 1
        return ConnectionID(connectionCount)
    }

    private func close(_ connection: TrackedConnection) {
        if let routingID = connection.routingID { finishDeferredWork(routingID: routingID) }
        if let routingID = connection.routingID, routingID.count == 5, routingID[0] == 0 {
            closedRoutingIDs.insert(routingID)
            closedRoutingIDOrder.append(routingID)
            if closedRoutingIDOrder.count > Self.closedRoutingIDMemory {
                closedRoutingIDs.remove(closedRoutingIDOrder.removeFirst())
            }
        }
        let records = core.connectionClosed(connection.id, now: clock.now())
        if !records.isEmpty {
            logger.debug(
                "connection closed", metadata: ["connection": "\(connection.id)", "users": "\(records.count)"])
        }
        publish(records)
    }
}
