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

    public var description: String {
        switch self {
        case .rejected(let error): "\(error.code.rawValue): \(error.message)"
        case .timedOut(let op, let ms): "no reply to \(op) within \(ms) ms: is the broker running?"
        case .malformed(let detail): "malformed reply: \(detail)"
        case .refused(let reason): reason
        }
    }
}
