/// Why an etcd call failed. ``isUnavailable`` tells the failures that mean "etcd cannot be reached or cannot
/// answer now" (try another member, or later) from answers that a retry would not change.
public enum EtcdError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No connection to the member, or the connection broke.
    case unreachable(String, String)
    /// The member did not answer within the deadline.
    case timedOut(String)
    /// The member answered with an error: its gRPC status code (`GRPCCore.RPCError.Code`'s name) and message.
    case rpc(code: String, String)
    /// The reply was not what etcd sends.
    case protocolError(String)
    /// A watch's start revision is older than the store's compaction: start again from a snapshot.
    case compacted(compactRevision: Int64)
    /// A lease that no longer exists (expired or revoked).
    case leaseNotFound(Int64)
    /// A watch was cancelled by its owner.
    case cancelled

    public var description: String {
        switch self {
        case .unreachable(let member, let reason): "etcd member \(member) unreachable: \(reason)"
        case .timedOut(let member): "etcd member \(member) did not answer in time"
        case .rpc(let code, let message): "etcd answered \(code): \(message)"
        case .protocolError(let reason): "unexpected reply from etcd: \(reason)"
        case .compacted(let revision): "watch start is older than etcd's compaction (at revision \(revision))"
        case .leaseNotFound(let id): "etcd lease \(id) not found"
        case .cancelled: "watch cancelled"
        }
    }

    /// Whether another member, or the same one later, may succeed: no connection, no answer in time, or an
    /// answer that says the cluster cannot serve now (etcd answers `unavailable` for no leader, a leader change or
    /// a request that timed out in raft, and `resourceExhausted` for too many requests).
    public var isUnavailable: Bool {
        switch self {
        case .unreachable, .timedOut: true
        case .rpc(let code, _): code == "unavailable" || code == "resourceExhausted"
        default: false
        }
    }
}
