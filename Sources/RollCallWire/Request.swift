import RollCallCore

/// A request on the command endpoint, decoded and validated.
public enum Request: Equatable, Sendable {
    case hello(PresenceCore.Hello)
    case heartbeat(session: SessionID)
    /// Sets a session's status and text, at once, or after `afterMilliseconds` if nothing else is asked first.
    case status(session: SessionID, status: Status, text: String?, afterMilliseconds: Int64? = nil)
    case bye(session: SessionID)
    case query(users: [UserID])
    case ping
    /// Defines, edits or reads a group; the reply's members start after `after` (paging, docs/protocol.md §6.7).
    case group(GroupID, GroupEdit, after: UserID? = nil)
    case ungroup(GroupID)
    /// Test mode only: move the broker's clock forward, firing every deadline on the way.
    case advance(milliseconds: Int64)

    /// The `op` that names the request on the wire.
    public var op: String {
        switch self {
        case .hello: "hello"
        case .heartbeat: "heartbeat"
        case .status: "status"
        case .bye: "bye"
        case .query: "query"
        case .ping: "ping"
        case .group: "group"
        case .ungroup: "ungroup"
        case .advance: "advance"
        }
    }
}

/// A request with the client's `id`, which the reply echoes.
public struct RequestEnvelope: Equatable, Sendable {
    public var id: JSON?
    public var request: Request
    public init(id: JSON?, request: Request) {
        self.id = id
        self.request = request
    }
}

/// A request that could not be accepted: the error to answer, and the client's `id` if it could be read.
public struct RequestRejection: Error, Equatable, Sendable {
    public var id: JSON?
    public var error: PresenceError

    public init(id: JSON?, error: PresenceError) {
        self.id = id
        self.error = error
    }
}
