import CZeroMQ

/// An event from a socket monitor (`zmq_socket_monitor`): a connection accepted, closed, and so on.
public struct MonitorEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case accepted, disconnected, closed, handshakeSucceeded
        /// The server refused this client's key (ZAP said no): the only way a client learns of it (libzmq#3505).
        case handshakeFailedAuth
        /// The handshake failed for another reason, such as a wrong server key or another mechanism.
        case handshakeFailedProtocol, handshakeFailedNoDetail
        case other(UInt16)
    }
    public var kind: Kind
    /// The event's value: for connection events, the file descriptor of the connection.
    public var value: Int32
    /// The endpoint the event is about.
    public var endpoint: String

    init?(frames: [Socket.Frame]) {
        guard frames.count == 2, frames[0].bytes.count == 6 else { return nil }
        let b = frames[0].bytes
        let event = UInt16(b[0]) | UInt16(b[1]) << 8
        let value = UInt32(b[2]) | UInt32(b[3]) << 8 | UInt32(b[4]) << 16 | UInt32(b[5]) << 24
        switch Int32(event) {
        case ZMQ_EVENT_ACCEPTED: kind = .accepted
        case ZMQ_EVENT_DISCONNECTED: kind = .disconnected
        case ZMQ_EVENT_CLOSED: kind = .closed
        case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: kind = .handshakeSucceeded
        case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: kind = .handshakeFailedAuth
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL: kind = .handshakeFailedProtocol
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: kind = .handshakeFailedNoDetail
        default: kind = .other(event)
        }
        self.value = Int32(bitPattern: value)
        self.endpoint = String(decoding: frames[1].bytes, as: UTF8.self)
    }
}

extension Socket {
    /// Which monitor events to report.
    public struct MonitorEvents: OptionSet, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        public static let accepted = MonitorEvents(rawValue: ZMQ_EVENT_ACCEPTED)
        public static let disconnected = MonitorEvents(rawValue: ZMQ_EVENT_DISCONNECTED)
        public static let handshakeSucceeded = MonitorEvents(rawValue: ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
        /// Every way a handshake can fail: refused by the server's ZAP handler, a protocol error, no detail.
        public static let handshakeFailed = MonitorEvents(
            rawValue: ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    }

    /// Starts monitoring this socket and returns the PAIR socket that receives its events, for the same thread.
    /// `name` must be unique in the context.
    public func monitor(_ events: MonitorEvents, name: String, context: Context) throws -> Socket {
        let endpoint = "inproc://monitor-\(name)"
        let handle = open
        try zmqCheck("zmq_socket_monitor") { zmq_socket_monitor(handle, endpoint, events.rawValue) }
        let pair = try Socket(context, .pair)
        try pair.set(.linger(milliseconds: 0))
        // No limit on queued events: libzmq drops monitor events past the high-water mark, and a lost
        // DISCONNECTED would leave a dead connection's sessions to their TTL.
        try pair.set(.receiveHighWaterMark(0))
        try pair.connect(endpoint)
        return pair
    }

    /// Stops the monitor started by ``monitor(_:name:context:)``; nothing if the socket is closed. Call it before
    /// closing the PAIR socket that reads the events, and before closing this socket: libzmq sends events from its
    /// I/O thread with a blocking send, so an event sent once the reader is gone (a connection that ends while this
    /// socket is torn down, which goes on after `zmq_close` returns) blocks that thread, and with it every connection
    /// of the context, for good.
    public func stopMonitor() throws {
        guard let handle else { return }
        _ = try zmqCheck("zmq_socket_monitor") { zmq_socket_monitor(handle, nil, 0) }
    }

    /// Reads one monitor event from a socket returned by ``monitor(_:name:context:)``, or `nil` if none waits.
    public func receiveMonitorEvent() throws -> MonitorEvent? {
        while let message = try receiveMessage(maxFrames: 2) {
            if let event = MonitorEvent(frames: message.frames) { return event }
        }
        return nil
    }
}

extension MonitorEvent {
    /// Ends the connection an `accepted` event reported, from under libzmq: `shutdown(2)` both ways, never
    /// `close(2)`, so the descriptor stays libzmq's until libzmq, reading end-of-file, closes the connection itself
    /// (and reports it `disconnected`). For refusing connections past a limit, which libzmq cannot do. Returns
    /// whether the call succeeded (it fails harmlessly if the connection is already gone).
    @discardableResult
    public func shutDownConnection() -> Bool {
        guard kind == .accepted else { return false }
        return ConnectionDescriptor.shutDown(value)
    }
}
