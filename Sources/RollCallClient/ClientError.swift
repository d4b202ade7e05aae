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
    /// The node answered `cluster_unavailable` (this message): it cannot take requests now, another node may.
    /// Clients treat it as a node that does not answer.
    case unavailable(String)

    /// The error code of a node that cannot take requests now (a cluster node cut off from etcd).
    public static let clusterUnavailable = "cluster_unavailable"

    /// Whether another node might answer where this one failed: no answer in time, or `cluster_unavailable`.
    public var isNodeFailure: Bool {
        switch self {
        case .timedOut, .unavailable: true
        case .rejected, .malformed, .refused: false
        }
    }

    public var description: String {
        switch self {
        case .rejected(let error): "\(error.code.rawValue): \(error.message)"
        case .timedOut(let op, let ms): "no reply to \(op) within \(ms) ms: is the broker running?"
        case .malformed(let detail): "malformed reply: \(detail)"
        case .refused(let reason): reason
        case .unavailable(let message): "\(Self.clusterUnavailable): \(message)"
        }
    }
}
