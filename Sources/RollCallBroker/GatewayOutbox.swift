import DequeModule
import RollCallCore
import Synchronization

/// What the event loop asks of one WebSocket connection on the gateway's side (RollCallGateway's channel handler).
/// The loop calls these on its own thread and never waits: each hops to the connection's SwiftNIO thread.
public protocol GatewayConnectionSink: AnyObject, Sendable {
    /// Frames are waiting in the outbox: take them with ``GatewayOutbox/take()`` and write them.
    func framesWaiting()
    /// Write what is queued, then a close frame with `code`, and cut the connection if the peer does not answer it.
    func close(code: UInt16, reason: String)
    /// The connection has fewer than ``GatewayOutbox/maxInFlight`` requests in the loop: it may read again.
    func resumeReading()
}

/// One WebSocket connection's two bounds between the event loop and the connection's SwiftNIO channel, without a
/// task or a buffer of its own beyond the frames not yet handed over.
///
/// Out: the loop pushes replies and updates without ever waiting (``push(_:)``); the first frame of a batch wakes
/// the connection's channel (``GatewayConnectionSink/framesWaiting()``), which takes the batch (``take()``), writes
/// it into the channel, and gives the bytes back once the channel has written them to the socket (``written(_:)``).
/// Bytes pushed and not yet written, in the outbox or in SwiftNIO's write buffer, are at most ``limitBytes``; past
/// it the loop closes the connection (close code 4008), so a reader that cannot keep up holds at most this much
/// (plus the kernel's socket buffer) and slows no one.
///
/// In: the channel counts each request it hands to the loop (``beginRequest()``) and stops reading while
/// ``maxInFlight`` of them wait for the loop, so a client that floods requests is held back by TCP, not queued in
/// memory; the loop counts each answer (``requestDone()``) and lets the channel read again.
public final class GatewayOutbox: Sendable {
    /// What became of a pushed frame.
    enum Pushed: Equatable {
        case queued
        /// Over the bound: nothing was queued, and the loop closes the connection.
        case full
        /// The connection is closing or closed: dropped.
        case gone
    }

    private struct State {
        var frames = Deque<[UInt8]>()
        /// Pushed and not yet written to the socket.
        var bytes = 0
        /// The sink has been told that frames wait and has not taken them yet.
        var woken = false
        var closed = false
        var inFlight = 0
        var paused = false
        /// Gone once the connection has ended, so that the outbox and the channel's handler do not keep each other.
        var sink: (any GatewayConnectionSink)?
        /// The loop's id for the connection, once the loop has opened it.
        var connection: ConnectionID?
    }

    private let state: Mutex<State>
    /// The most bytes pushed and not yet written.
    public let limitBytes: Int
    /// The most requests waiting for the loop.
    public let maxInFlight: Int

    public init(
        limitBytes: Int, maxInFlight: Int = WebSocketSettings.maxRequestsInFlight, sink: any GatewayConnectionSink
    ) {
        self.limitBytes = limitBytes
        self.maxInFlight = maxInFlight
        state = Mutex(State(sink: sink))
    }

    // MARK: The loop's side

    /// The loop's id for the connection: set by the loop when it opens the connection, read by the loop's later jobs.
    var connection: ConnectionID? {
        get { state.withLock { $0.connection } }
        set { state.withLock { $0.connection = newValue } }
    }

    /// Queues a frame for the channel, without waiting.
    func push(_ frame: [UInt8]) -> Pushed {
        let (result, wake) = state.withLock { s -> (Pushed, (any GatewayConnectionSink)?) in
            guard !s.closed else { return (.gone, nil) }
            guard s.bytes + frame.count <= limitBytes else { return (.full, nil) }
            s.frames.append(frame)
            s.bytes += frame.count
            if s.woken { return (.queued, nil) }
            s.woken = true
            return (.queued, s.sink)
        }
        wake?.framesWaiting()
        return result
    }

    /// Asks the channel to close the connection with `code` once what is queued before it has been written; frames
    /// pushed later are dropped.
    public func close(code: UInt16, reason: String) {
        let sink = state.withLock { s -> (any GatewayConnectionSink)? in
            guard !s.closed else { return nil }
            s.closed = true
            return s.sink
        }
        sink?.close(code: code, reason: reason)
    }

    /// One of the connection's requests has been answered: the channel may read another.
    func requestDone() {
        let sink = state.withLock { s -> (any GatewayConnectionSink)? in
            s.inFlight -= 1
            guard s.paused, s.inFlight < maxInFlight else { return nil }
            s.paused = false
            return s.sink
        }
        sink?.resumeReading()
    }

    // MARK: The channel's side

    /// The frames waiting, in order; their bytes still count until ``written(_:)``.
    public func take() -> Deque<[UInt8]> {
        state.withLock { s in
            s.woken = false
            defer { s.frames = [] }
            return s.frames
        }
    }

    /// `count` bytes taken by ``take()`` have been written to the socket (or dropped with the connection).
    public func written(_ count: Int) {
        state.withLock { $0.bytes -= count }
    }

    /// Counts one more request handed to the loop; `false` if the connection now has ``maxInFlight`` of them and
    /// must stop reading until ``GatewayConnectionSink/resumeReading()``.
    public func beginRequest() -> Bool {
        state.withLock { s in
            s.inFlight += 1
            guard s.inFlight >= maxInFlight else { return true }
            s.paused = true
            return false
        }
    }

    /// The connection has ended: nothing more is queued, and whatever is queued is freed.
    public func finish() {
        state.withLock { s in
            s.closed = true
            s.frames = []
            s.sink = nil
        }
    }

    /// Bytes pushed and not yet written.
    public var queuedBytes: Int { state.withLock { $0.bytes } }
}
