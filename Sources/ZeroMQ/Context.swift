import CZeroMQ
import Synchronization

/// A ZeroMQ context: the I/O threads behind every socket made from it.
///
/// libzmq's contexts are thread-safe, so a context may be shared across threads; its sockets may not.
public final class Context: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    private let terminated = Mutex(false)

    /// Creates a context with libzmq's defaults (one I/O thread).
    public init() throws {
        guard let handle = zmq_ctx_new() else {
            throw ZMQError(code: zmq_errno(), function: "zmq_ctx_new")
        }
        self.handle = handle
    }

    deinit { terminate() }

    /// The process's one context, as the ZeroMQ guide advises: clients that are not handed another share it. It is
    /// made on first use and never terminated (the process's exit ends it).
    public static func shared() throws -> Context {
        try sharedContext.withLock { shared in
            if let shared { return shared }
            let made = try Context()
            shared = made
            return made
        }
    }

    private static let sharedContext = Mutex<Context?>(nil)

    /// Ends the context once every socket made from it is closed, and waits until libzmq has really closed them,
    /// listening ports included. Call it only when all its sockets are closed, or it waits for them.
    public func terminate() {
        terminated.withLock { done in
            guard !done else { return }
            // The funnel retries EINTR (a signal while it waits for sockets to close) and traps on EFAULT (a bug).
            _ = try? zmqCheck("zmq_ctx_term") { zmq_ctx_term(handle) }
            done = true
        }
    }
}
