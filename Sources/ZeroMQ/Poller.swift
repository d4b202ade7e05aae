import CZeroMQ

/// Waits until one of several sockets has a message to read (`zmq_poll`).
public struct Poller {
    private var items: [zmq_pollitem_t]
    private let sockets: [Socket]  // keeps the handles in `items` alive

    /// A poller watching `sockets` for incoming messages, reported in the same order.
    public init(_ sockets: [Socket]) {
        self.sockets = sockets
        self.items = sockets.map {
            zmq_pollitem_t(socket: $0.open, fd: 0, events: Int16(ZMQ_POLLIN), revents: 0)
        }
    }

    /// Waits up to `timeout` milliseconds (-1 for ever, 0 not at all) and returns which sockets are readable.
    public mutating func poll(timeout milliseconds: Int) throws -> [Bool] {
        let count = Int32(items.count)
        let timeout = milliseconds
        try items.withUnsafeMutableBufferPointer { (buffer) throws in
            let base = buffer.baseAddress
            // An EINTR retry here restarts the full timeout; callers recompute deadlines after every wake-up.
            _ = try zmqCall("zmq_poll") { zmq_poll(base, count, timeout) }
        }
        return items.map { $0.revents & Int16(ZMQ_POLLIN) != 0 }
    }
}
