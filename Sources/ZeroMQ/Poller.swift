import CZeroMQ

/// Waits until one of several sockets has a message to read, or can send one (`zmq_poll`).
public struct Poller {
    /// What to wait for.
    public enum Events: Sendable {
        /// A message to read (`ZMQ_POLLIN`).
        case readable
        /// Room to send a message (`ZMQ_POLLOUT`), such as a first completed connection under `ZMQ_IMMEDIATE`.
        case writable

        var flag: Int16 { Int16(self == .readable ? ZMQ_POLLIN : ZMQ_POLLOUT) }
    }

    private var items: [zmq_pollitem_t]
    private let sockets: [Socket]  // keeps the handles in `items` alive
    private let events: Events

    /// A poller watching `sockets` for `events`, reported in the same order.
    public init(_ sockets: [Socket], events: Events = .readable) {
        self.sockets = sockets
        self.events = events
        self.items = sockets.map {
            zmq_pollitem_t(socket: $0.open, fd: 0, events: events.flag, revents: 0)
        }
    }

    /// Waits up to `timeout` milliseconds (-1 for ever, 0 not at all) and returns which sockets are ready.
    public mutating func poll(timeout milliseconds: Int) throws -> [Bool] {
        let count = Int32(items.count)
        let timeout = milliseconds
        try items.withUnsafeMutableBufferPointer { (buffer) throws in
            let base = buffer.baseAddress
            // An EINTR retry here restarts the full timeout; callers recompute deadlines after every wake-up.
            _ = try zmqCall("zmq_poll") { zmq_poll(base, count, timeout) }
        }
        return items.map { $0.revents & events.flag != 0 }
    }
}
