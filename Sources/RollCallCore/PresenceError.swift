/// The stable error codes of the protocol. The raw values travel on the wire and never change meaning.
public enum ErrorCode: String, Sendable, CaseIterable {
    /// The request is malformed: not JSON, not an object, a missing or mistyped field, a value out of range.
    case badRequest = "bad_request"
    /// A user id breaks the id rules.
    case badUser = "bad_user"
    /// A group id breaks the id rules.
    case badGroup = "bad_group"
    /// The `op` is not one the broker knows.
    case unknownOp = "unknown_op"
    /// The session does not exist or has ended: say `hello` again.
    case unknownSession = "unknown_session"
    /// The request is larger than the broker accepts.
    case tooLarge = "too_large"
    /// A configured limit would be exceeded.
    case limit = "limit"
    /// The key (or token) the connection authenticated with may not do this; the message says what it may do.
    case forbidden = "forbidden"
    /// This cluster node cannot reach the cluster's store (etcd) now, so it takes no new sessions and answers no
    /// reads it cannot vouch for: try another node, or later (docs/cluster.md).
    case clusterUnavailable = "cluster_unavailable"
    /// The presence log no longer holds what was asked (an offset or a time older than its retention) or the
    /// request names another log (`log_epoch`): `query` the current state and continue from the offset `ping`
    /// reports (docs/history.md).
    case snapshotRequired = "snapshot_required"
    /// The broker keeps no presence log (`--history-retention-ms 0`, `--ephemeral`, or a cluster node without a data
    /// directory), so it answers no `history`, `events` or `query` with `at` (docs/history.md).
    case noHistory = "no_history"
}

/// An error answered to a request: a stable code and a message for people.
public struct PresenceError: Error, Equatable, Sendable {
    public var code: ErrorCode
    public var message: String
    public init(_ code: ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }
}
