/// What a session says about its user. `offline` means connected but not available (an app in the background).
/// `invisible` ("appear offline") is a session's own status only: everyone else sees the user as if that session
/// did not exist, so no record that others receive ever carries it.
public enum Status: String, Sendable, CaseIterable, Comparable {
    case online, busy, away, offline, invisible

    /// The statuses others can see, in the order records and group counts list them: every case but `invisible`.
    public static let published: [Status] = [.online, .busy, .away, .offline]

    /// How available the status is; a user's effective status is that of the most available session.
    public var availability: Int {
        switch self {
        case .online: 3
        case .busy: 2
        case .away: 1
        case .offline, .invisible: 0
        }
    }

    /// Whether a user with this status counts as available (anything but `offline`; `invisible` sessions are left
    /// out before this question is asked).
    public var isAvailable: Bool { self != .offline && self != .invisible }

    public static func < (lhs: Status, rhs: Status) -> Bool { lhs.availability < rhs.availability }
}

/// Why a user stopped being available.
public enum OfflineReason: String, Sendable, CaseIterable {
    /// The last available session said `bye`.
    case bye
    /// The last available session set its status to `offline`.
    case status
    /// The connection that carried the last available session closed.
    case closed
    /// The last available session stopped heartbeating for its TTL.
    case timeout
    /// The broker restarted and the session did not come back in time.
    case restart
    /// The cluster node that held the last available session was lost: it died, or it was cut off from the
    /// cluster's store for longer than its lease (docs/cluster.md).
    case nodeLost = "node_lost"
    /// The CURVE key whose connection carried the last available session was removed from the authorized keys
    /// (SIGHUP): the broker ended the session at the reload and closed the connection (docs/security.md).
    case revoked
}
