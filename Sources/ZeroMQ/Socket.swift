import CZeroMQ

/// A ZeroMQ socket. Like libzmq's, it belongs to one thread at a time: hand it to another thread only through a
/// synchronising hand-off (see ``HandOff``), never use it from two at once.
public final class Socket {
    /// The socket types this project uses.
    public enum Kind: Sendable {
        case router, dealer, req, rep, pub, sub, xpub, xsub, pair, push, pull

        var rawValue: Int32 {
            switch self {
            case .router: ZMQ_ROUTER
            case .dealer: ZMQ_DEALER
            case .req: ZMQ_REQ
            case .rep: ZMQ_REP
            case .pub: ZMQ_PUB
            case .sub: ZMQ_SUB
            case .xpub: ZMQ_XPUB
            case .xsub: ZMQ_XSUB
            case .pair: ZMQ_PAIR
            case .push: ZMQ_PUSH
            case .pull: ZMQ_PULL
            }
        }
    }

    /// One received frame.
    public struct Frame: Sendable, Equatable {
        /// The frame's bytes.
        public var bytes: [UInt8]
        /// Whether more frames of the same message follow.
        public var more: Bool
        /// The file descriptor of the connection the frame came on (`ZMQ_SRCFD`) when the receive asked for it, else
        /// -1 (also where there is none, such as inproc).
        public var sourceFD: Int32
        /// The `User-Id` a ZAP handler gave the connection the frame came on, when the receive asked for it and
        /// there is one (`zmq_msg_gets`).
        public var userID: String? = nil
    }

    public let kind: Kind
    private let context: Context  // keeps the context alive while the socket is open
    private(set) var handle: UnsafeMutableRawPointer?

    /// Opens a socket of `kind` in `context`.
    public init(_ context: Context, _ kind: Kind) throws {
        guard let handle = zmq_socket(context.handle, kind.rawValue) else {
            throw ZMQError(code: zmq_errno(), function: "zmq_socket")
        }
        self.context = context
        self.kind = kind
        self.handle = handle
    }

    deinit { close() }

    /// Closes the socket; later calls on it fail. Calling it twice is harmless.
    public func close() {
        guard let handle else { return }
        // zmq_close fails only for a pointer that is no socket (a bug: the funnel traps); nothing is left to throw.
        _ = try? zmqCheck("zmq_close") { zmq_close(handle) }
        self.handle = nil
    }

    var open: UnsafeMutableRawPointer {
        guard let handle else { preconditionFailure("use of a closed ZeroMQ socket") }
        return handle
    }

    /// Sets one option.
    public func set(_ option: SocketOption) throws {
        try option.apply(to: open)
    }

    /// Binds to `endpoint`, such as `tcp://127.0.0.1:7730` or `tcp://127.0.0.1:*` for a free port.
    public func bind(_ endpoint: String) throws {
        let handle = open
        try zmqCheck("zmq_bind") { zmq_bind(handle, endpoint) }
    }

    /// Connects to `endpoint`; libzmq completes and repairs the connection in the background.
    public func connect(_ endpoint: String) throws {
        let handle = open
        try zmqCheck("zmq_connect") { zmq_connect(handle, endpoint) }
    }

    /// The endpoint last bound, with the port the system chose for `*`.
    public func lastEndpoint() throws -> String {
        var buffer = [CChar](repeating: 0, count: 1024)
        var size = buffer.count
        let handle = open
        try zmqCheck("zmq_getsockopt") { zmq_getsockopt(handle, ZMQ_LAST_ENDPOINT, &buffer, &size) }
        return String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    // MARK: Sending

    /// Sends one frame. Returns `false`, having sent nothing, when the frame cannot be queued without waiting
    /// (only when `wait` is false).
    @discardableResult
    public func send(_ bytes: UnsafeRawBufferPointer, more: Bool = false, wait: Bool = false) throws -> Bool {
        let flags = (more ? ZMQ_SNDMORE : 0) | (wait ? 0 : ZMQ_DONTWAIT)
        let handle = open
        return try zmqCall("zmq_send") { zmq_send(handle, bytes.baseAddress, bytes.count, flags) } != nil
    }

    /// Sends one frame of bytes; see ``send(_:more:wait:)-(UnsafeRawBufferPointer,_,_)``.
    @discardableResult
    public func send(_ bytes: [UInt8], more: Bool = false, wait: Bool = false) throws -> Bool {
        try bytes.withUnsafeBytes { (raw) throws in try send(raw, more: more, wait: wait) }
    }

    /// Sends one frame holding the UTF-8 bytes of `text`.
    @discardableResult
    public func send(_ text: String, more: Bool = false, wait: Bool = false) throws -> Bool {
        var text = text
        return try text.withUTF8 { (utf8) throws in
            try send(UnsafeRawBufferPointer(utf8), more: more, wait: wait)
        }
    }

    /// Sends a whole message. ZeroMQ delivers a message whole or not at all: once the first frame is queued the
    /// rest always are, so `false` means nothing was sent.
    @discardableResult
    public func send(message frames: [[UInt8]], wait: Bool = false) throws -> Bool {
        for (index, frame) in frames.enumerated() {
            let more = index < frames.count - 1
            guard try send(frame, more: more, wait: wait || index > 0) else { return false }
        }
        return true
    }

    // MARK: Receiving

    /// Receives one frame, or `nil` when none is waiting (only when `wait` is false). `sourceDescriptor` also reads
    /// the descriptor of the connection it came on (one more libzmq call): only a broker matching requests to
    /// connections needs it.
    /// `userID` also reads the `User-Id` property the connection's ZAP handler set.
    public func receiveFrame(wait: Bool = false, sourceDescriptor: Bool = false, userID: Bool = false) throws -> Frame?
    {
        var message = zmq_msg_t()
        zmq_msg_init(&message)
        defer { zmq_msg_close(&message) }
        let handle = open
        guard try zmqCall("zmq_msg_recv", { zmq_msg_recv(&message, handle, wait ? 0 : ZMQ_DONTWAIT) }) != nil else {
            return nil
        }
        let size = zmq_msg_size(&message)
        let bytes: [UInt8]
        if size == 0 {
            bytes = []
        } else {
            let data = UnsafeRawBufferPointer(start: zmq_msg_data(&message), count: size)
            bytes = [UInt8](data)
        }
        let more = zmq_msg_more(&message) != 0
        // EINVAL, the one error zmq_msg_get reports, means the frame has no source descriptor (libzmq knows it for
        // frames read from a stream connection only): -1, as the broker's connection tracker expects.
        let sourceFD =
            sourceDescriptor ? (try? zmqCheck("zmq_msg_get") { zmq_msg_get(&message, ZMQ_SRCFD) }) ?? -1 : -1
        var user: String?
        if userID, let property = zmq_msg_gets(&message, "User-Id") { user = String(cString: property) }
        return Frame(bytes: bytes, more: more, sourceFD: sourceFD, userID: user)
    }

    /// Receives a whole message, or `nil` when none is waiting (only when `wait` is false).
    ///
    /// At most `maxFrames` frames are kept; the rest of an overlong message is read and dropped, and
    /// `truncated` says so. Reading it all keeps the socket in step with the next message.
    public func receiveMessage(
        wait: Bool = false, maxFrames: Int = .max, sourceDescriptor: Bool = false, userID: Bool = false
    ) throws -> (frames: [Frame], truncated: Bool)? {
        guard let first = try receiveFrame(wait: wait, sourceDescriptor: sourceDescriptor, userID: userID) else {
            return nil
        }
        var frames = [first]
        var truncated = false
        var more = first.more
        while more {
            // The rest of a message is already here: ZeroMQ delivers messages whole.
            guard let next = try receiveFrame(wait: true, sourceDescriptor: sourceDescriptor, userID: userID) else {
                break
            }
            more = next.more
            if frames.count < maxFrames {
                frames.append(next)
            } else {
                truncated = true
            }
        }
        return (frames, truncated)
    }
}

/// Moves a value that is not `Sendable`, such as a ``Socket``, to another thread exactly once.
///
/// libzmq allows a socket to migrate between threads when a full memory barrier separates the two; a thread start
/// or a lock hand-off is one. The sender must not touch the value again.
public struct HandOff<Value>: @unchecked Sendable {
    private let value: Value
    public init(_ value: Value) { self.value = value }
    public consuming func take() -> Value { value }
}
