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
    /// `query` with `at`: each user's record as it was at that broker time, from the presence log.
    case queryAt(users: [UserID], at: BrokerTime)
    /// A page of one user's transitions from the presence log (docs/history.md).
    case history(HistoryQuery)
    /// A page of every user's transitions after an offset: the feed a backend reads to catch up.
    case events(after: UInt64, logEpoch: String?, limit: Int)
    /// Sets (or, with neither side, reads) a user's privacy policy (docs/privacy.md).
    case privacy(user: UserID, visibility: Audience?, lastSeen: Audience?)
    /// Edits a user's contacts: the viewers the user shares with.
    case contacts(user: UserID, ListEdit)
    /// Edits the users a user blocks (`add` or `remove`).
    case block(user: UserID, ListEdit)

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
        case .queryAt: "query"
        case .history: "history"
        case .events: "events"
        case .privacy: "privacy"
        case .contacts: "contacts"
        case .block: "block"
        }
    }

    /// Whether the request reads the presence log.
    public var readsLog: Bool {
        switch self {
        case .queryAt, .history, .events: true
        default: false
        }
    }
}

/// What a `history` request asks for: one user's transitions with `from <= time <= to` and offset above `after`,
/// at most `limit`, oldest first.
public struct HistoryQuery: Equatable, Sendable {
    public var user: UserID
    public var from: BrokerTime?
    public var to: BrokerTime?
    public var after: UInt64?
    public var limit: Int
    /// A `history` or `events` page holds this many transitions unless the request asks for fewer.
    public static let defaultLimit = 100
    /// And at most this many.
    public static let maxLimit = 1_000

    public init(user: UserID, from: BrokerTime? = nil, to: BrokerTime? = nil, after: UInt64? = nil, limit: Int) {
        self.user = user
        self.from = from
        self.to = to
        self.after = after
        self.limit = limit
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
