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
