import RollCallWire

extension Request {
    /// Whether the reply can be large: a group (a page of members) or a query of many users.
    var isExpensive: Bool {
        switch self {
        case .group, .history, .events, .queryAt: true  // a read of the log goes to the reader thread in its turn
        case .query(let users): users.count > 32
        default: false
        }
    }

    /// Whether the request renews a session it names: `heartbeat`, `status`.
    var renewsSession: Bool {
        switch self {
        case .heartbeat, .status: true
        default: false
        }
    }

    /// Whether the request only reads (its reply is all it does).
    var isRead: Bool {
        switch self {
        case .query, .ping, .queryAt, .history, .events: true
        case .group(_, let edit, _): edit.isReadOnly
        default: false
        }
    }
}
