import RollCallCore

/// Why a client call failed.
public enum ClientError: Error, Equatable, CustomStringConvertible {
    /// The broker answered with an error.
    case rejected(PresenceError)
    /// No reply came within the timeout.
    case timedOut(op: String, milliseconds: Int)
    /// The broker's answer does not follow the protocol.
    case malformed(String)
    /// The broker would not talk to this client: its CURVE handshake failed (an unknown key, a wrong server key).
    case refused(String)
    /// Whether another node might answer where this one failed: no answer in time, or `cluster_unavailable` (a
    /// node of a cluster that cannot reach etcd now), which clients treat as a node that does not answer.
    public var isNodeFailure: Bool {
        switch self {
        case .timedOut: true
        case .rejected(let error): error.code == .clusterUnavailable
        case .malformed, .refused: false
        }
    }

    public var description: String {
        switch self {
        case .rejected(let error): "\(error.code.rawValue): \(error.message)"
        case .timedOut(let op, let ms): "no reply to \(op) within \(ms) ms: is the broker running?"
        case .malformed(let detail): "malformed reply: \(detail)"
        case .refused(let reason): reason
        }
    }
}
