import Logging
import RollCallCore
import ZeroMQ

/// Which connection a request came on, and when a connection closes.
///
/// libzmq 4.3.4 has no ROUTER_NOTIFY, so the loop watches the ROUTER's socket monitor: ACCEPTED and DISCONNECTED
/// events name the connection's file descriptor, and `ZMQ_SRCFD` names the descriptor a request came on. A
/// descriptor is reused by the kernel once closed, so each accepted connection gets a fresh ``ConnectionID``, and
/// pending monitor events are read before every request: libzmq queues a connection's DISCONNECTED before it
/// closes the descriptor, so a request from a new connection on a reused descriptor is never credited to the old
/// one. The core fences sessions by connection id, so the close of an old connection never ends a session that has
/// moved on.
struct TrackedConnection {
    var id: ConnectionID
    /// Whether its ACCEPTED event was seen.
    var accepted: Bool
    /// The routing id its requests carry, once one arrived.
    var routingID: [UInt8]?
}

extension EventLoop {
    /// Reads every pending connection event.
    func handleConnectionEvents() throws {
        while let event = try monitor.receiveMonitorEvent() {
            switch event.kind {
            case .accepted:
                if let known = connectionsByDescriptor[event.value] {
                    if known.accepted {
                        // We missed this descriptor's DISCONNECTED: it closed before the kernel reused it.
                        close(known.id)
                        connectionsByDescriptor[event.value] = TrackedConnection(id: newConnection(), accepted: true)
                    } else {
                        connectionsByDescriptor[event.value]?.accepted = true  // its request came first
                    }
                } else {
                    connectionsByDescriptor[event.value] = TrackedConnection(id: newConnection(), accepted: true)
                }
            case .disconnected:
                if let known = connectionsByDescriptor.removeValue(forKey: event.value) { close(known.id) }
            default:
                break
            }
        }
    }

    /// The connection a request came on, from its source descriptor and routing id.
    ///
    /// A routing id that libzmq made (five bytes, the first zero; ids that clients set may not start with a zero
    /// byte) names one connection for the socket's whole life. So a request whose descriptor and generated routing
    /// id are already known together comes from that connection, and needs no look at the monitor: that saves a
    /// system call per request. Any other request first reads the pending connection events.
    func connection(ofDescriptor descriptor: Int32, routingID: [UInt8]) throws -> ConnectionID? {
        guard descriptor >= 0 else { return nil }
        let generated = routingID.count == 5 && routingID[0] == 0
        if generated, let known = connectionsByDescriptor[descriptor], known.routingID == routingID {
            return known.id
        }
        try handleConnectionEvents()
        if var known = connectionsByDescriptor[descriptor] {
            known.routingID = routingID
            connectionsByDescriptor[descriptor] = known
            return known.id
        }
        // No ACCEPTED seen for it (libzmq queues it before the connection's first message, so this should not
        // happen); track it anyway, and let a late ACCEPTED adopt it.
        let connection = newConnection()
        connectionsByDescriptor[descriptor] = TrackedConnection(id: connection, accepted: false, routingID: routingID)
        return connection
    }

    private func newConnection() -> ConnectionID {
        connectionCount += 1
        return ConnectionID(connectionCount)
    }

    private func close(_ connection: ConnectionID) {
        let records = core.connectionClosed(connection, now: clock.now())
        if !records.isEmpty {
            logger.debug("connection closed", metadata: ["connection": "\(connection)", "users": "\(records.count)"])
        }
        publish(records)
    }
}
