import Synchronization

/// Wakes a thread that is blocked in ``Poller/poll(timeout:)`` from any other thread.
///
/// The receiving socket belongs to the polling thread; the sending one is shared behind a lock, which is also the
/// memory barrier libzmq asks for when a socket is used by more than one thread in turn.
public final class Waker: Sendable {
    private let sender: Mutex<Socket?>

    /// Makes the pair and returns the waker and the socket to poll, which the caller hands to its thread.
    public static func make(context: Context, name: String) throws -> (Waker, Socket) {
        let endpoint = "inproc://waker-\(name)"
        let receiver = try Socket(context, .pair)
        try receiver.set(.linger(milliseconds: 0))
        try receiver.bind(endpoint)
        let sender = try Socket(context, .pair)
        try sender.set(.linger(milliseconds: 0))
        try sender.connect(endpoint)
        return (Waker(sender), receiver)
    }

    private init(_ sender: sending Socket) { self.sender = Mutex(sender) }

    /// Wakes the poller once; wakes that pile up before it reads them are merged.
    public func wake() {
        sender.withLock { socket in _ = try? socket?.send([1]) }
    }

    /// Closes the sending side.
    public func close() {
        sender.withLock { socket in
            socket?.close()
            socket = nil
        }
    }
}

extension Socket {
    /// Reads and drops every message waiting on the socket, such as wake-ups.
    public func drain() throws {
        while try receiveMessage() != nil {}
    }
}
