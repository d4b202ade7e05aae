import CZeroMQ

#if canImport(Glibc)
    import Glibc
#endif

/// An error reported by libzmq: the `errno` it set, the function that failed, and libzmq's own message.
public struct ZMQError: Error, Equatable, CustomStringConvertible {
    /// The `errno` value libzmq reported.
    public let code: Int32
    /// The `zmq_*` function that failed.
    public let function: String
    /// libzmq's description of `code` (`zmq_strerror`).
    public let message: String

    init(code: Int32, function: String) {
        self.code = code
        self.function = function
        self.message = String(cString: zmq_strerror(code))
    }

    public var description: String { "\(function): \(message) (errno \(code))" }
}

/// The one funnel every libzmq call goes through.
///
/// `EINTR` is retried, `EAGAIN` becomes `nil` (the call would block), errors that can only mean a bug in this
/// wrapper trap, and everything else is thrown as a ``ZMQError`` naming the function.
@inline(__always)
func zmqCall(_ function: StaticString, _ body: () -> Int32) throws -> Int32? {
    while true {
        let rc = body()
        if rc >= 0 { return rc }
        let code = zmq_errno()
        switch code {
        case EINTR:
            continue
        case EAGAIN:
            return nil
        case ENOTSOCK, EFAULT:
            preconditionFailure("\(function): \(String(cString: zmq_strerror(code))): a bug in the ZeroMQ wrapper")
        default:
            throw ZMQError(code: code, function: "\(function)")
        }
    }
}

/// Like ``zmqCall(_:_:)`` for calls that never answer `EAGAIN`.
@inline(__always)
@discardableResult
func zmqCheck(_ function: StaticString, _ body: () -> Int32) throws -> Int32 {
    guard let rc = try zmqCall(function, body) else {
        throw ZMQError(code: EAGAIN, function: "\(function)")
    }
    return rc
}
