import DequeModule
import RollCallCore

/// Where a request came from.
enum RequestOrigin: Equatable {
    /// A live connection.
    case connection(ConnectionID)
    /// A transport without descriptors (such as inproc): not tracked, sessions rely on their TTL.
    case untracked
    /// A connection that has closed: nobody can read the reply, and its sessions are already dealt with.
    case closed
}

/// The broker's view of its ROUTER's connections: which connection a request came on, and which connections closed.
/// A value with no sockets: the loop feeds it the socket monitor's events and asks it about each request's
/// descriptor (`ZMQ_SRCFD`) and routing id, and it answers with connection ids and the connections that closed.
///
/// libzmq 4.3.4 has no ROUTER_NOTIFY, so the monitor, started before the socket binds, is the only source: ACCEPTED
/// and DISCONNECTED name a connection's file descriptor. The kernel reuses descriptors, so each accepted connection
/// gets a fresh ``ConnectionID``, and a request whose descriptor and routing id are not known together is credited
/// only after the pending events are read (``needsEvents(descriptor:routingID:)``): libzmq queues a connection's
/// DISCONNECTED before it closes the descriptor, and a new connection's ACCEPTED before its first message. The core
/// fences sessions by connection id, so the close of an old connection never ends a session that has moved on.
struct ConnectionTracker {
    /// A connection as the tracker knows it.
    struct Connection: Equatable {
        var id: ConnectionID
        /// The routing id its requests carry, once one arrived.
        var routingID: [UInt8]?
        /// The `User-Id` its requests carry (with CURVE, its key's Z85 text), once one arrived.
        var userID: String?
    }

    /// A monitor event.
    enum Event: Equatable {
        case accepted(descriptor: Int32)
        case disconnected(descriptor: Int32)
    }

    private var byDescriptor: [Int32: Connection] = [:]
    private var issued: UInt64 = 0
    private var closedRoutingIDs: Set<[UInt8]> = []
    private var closedRoutingIDOrder: Deque<[UInt8]> = []
    /// How many routing ids of closed connections are remembered, to recognise their late messages.
    let closedRoutingIDMemory: Int

    init(closedRoutingIDMemory: Int = 65_536) { self.closedRoutingIDMemory = closedRoutingIDMemory }

    /// Open connections.
    var count: Int { byDescriptor.count }

    /// A fresh id for a connection of another transport (a WebSocket), from the same count, so that no two
    /// connections of any transport share one.
    mutating func issue() -> ConnectionID {
        issued += 1
        return ConnectionID(issued)
    }

    /// Applies a monitor event; returns the connections that closed because of it, for the loop to end their
    /// sessions: the one disconnected, or one whose DISCONNECTED was missed and whose descriptor came back.
    mutating func apply(_ event: Event) -> [Connection] {
        switch event {
        case .accepted(let descriptor):
            let stale = byDescriptor[descriptor]
            issued += 1
            byDescriptor[descriptor] = Connection(id: ConnectionID(issued))
            return stale.map { [forget($0)] } ?? []
        case .disconnected(let descriptor):
            return byDescriptor.removeValue(forKey: descriptor).map { [forget($0)] } ?? []
        }
    }

    /// The fast path: the origin of a request that needs no look at the monitor, or `nil` when the pending events
    /// must be read (``apply(_:)``) before ``origin(descriptor:routingID:userID:)`` can say. A routing id that libzmq made
    /// (five bytes, the first zero) names one connection for the socket's whole life, so a request whose descriptor
    /// and generated routing id are known together comes from that connection: one system call saved per request.
    func knownOrigin(descriptor: Int32, routingID: [UInt8]) -> RequestOrigin? {
        guard descriptor >= 0 else { return .untracked }
        if Self.isGenerated(routingID), let known = byDescriptor[descriptor], known.routingID == routingID {
            return .connection(known.id)
        }
        return nil
    }

    /// The origin of a request, once every pending event has been applied. It binds the connection to the routing
    /// id and `User-Id` of its first request (libzmq gives every message of a connection the same `User-Id`).
    mutating func origin(descriptor: Int32, routingID: [UInt8], userID: String? = nil) -> RequestOrigin {
        if let known = knownOrigin(descriptor: descriptor, routingID: routingID) { return known }
        if Self.isGenerated(routingID) && closedRoutingIDs.contains(routingID) { return .closed }  // a late message
        // The monitor has seen every connection, so a descriptor it does not know has closed.
        guard var known = byDescriptor[descriptor] else { return .closed }
        if let bound = known.routingID, bound != routingID {
            // libzmq numbers the routing ids it makes in the order of connections. A newer one than the bound id
            // means the bound one came from an older connection on this descriptor, read late and credited to
            // this one (its close and this connection's accept were both read before it): this request is this
            // connection's own, and the id is bound again. An older one, or any id a client chose, is a late
            // message of a closed connection.
            guard Self.isGenerated(bound), Self.isGenerated(routingID), Self.order(routingID) > Self.order(bound)
            else { return .closed }
        }
        known.routingID = routingID
        known.userID = userID
        byDescriptor[descriptor] = known
        return .connection(known.id)
    }

    /// The open connections whose requests carried a `User-Id` that `revoked` says yes to, with their descriptors, in
    /// the order of their ids: those a reload must close. A connection that has sent no request yet is not known by
    /// its key, and is not among them.
    func connections(where revoked: (String) -> Bool) -> [(descriptor: Int32, connection: Connection)] {
        byDescriptor.compactMap { descriptor, connection in
            guard let userID = connection.userID, revoked(userID) else { return nil }
            return (descriptor, connection)
        }.sorted { $0.connection.id.rawValue < $1.connection.id.rawValue }
    }

    /// Remembers a closing connection's generated routing id, so that its late messages are recognised.
    private mutating func forget(_ connection: Connection) -> Connection {
        if let routingID = connection.routingID, Self.isGenerated(routingID) {
            closedRoutingIDs.insert(routingID)
            closedRoutingIDOrder.append(routingID)
            if closedRoutingIDOrder.count > closedRoutingIDMemory {
                closedRoutingIDs.remove(closedRoutingIDOrder.removeFirst())
            }
        }
        return connection
    }

    /// Whether libzmq made the routing id (a client that sets none gets five bytes, the first zero).
    static func isGenerated(_ routingID: [UInt8]) -> Bool { routingID.count == 5 && routingID[0] == 0 }

    /// A generated routing id's place in libzmq's count of connections (its last four bytes, big-endian).
    static func order(_ routingID: [UInt8]) -> UInt32 {
        routingID.dropFirst().reduce(0) { $0 << 8 | UInt32($1) }
    }
}
