import DequeModule
import Synchronization

/// One WebSocket connection's two bounded queues between the event loop and the gateway's threads.
///
/// Out: the loop pushes replies and updates without ever waiting (``push(_:)``), up to ``limitBytes``; past it the
/// loop closes the connection (close code 4008), so a reader that cannot keep up holds at most this much and slows
/// no one. The gateway's writer takes what is queued (``next()``) and writes it at the peer's pace.
///
/// In: the gateway reads the next request only while fewer than ``maxInFlight`` of the connection's requests wait
/// for the loop (``beginRequest()``), so a client that floods requests is held back by TCP, not queued in memory.
public final class GatewayOutbox: Sendable {
    /// What the writer does next.
    public enum Item: Sendable, Equatable {
        /// A text frame: a reply or an update.
        case frame([UInt8])
        /// The loop closed the connection: send a close frame with this code and reason, then stop.
        case close(code: UInt16, reason: String)
    }

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
        var bytes = 0
        var close: Item?
        var finished = false
        var writer: CheckedContinuation<[Item], Never>?
        var inFlight = 0
        var reader: CheckedContinuation<Void, Never>?
        var onClose: (@Sendable () -> Void)?

        /// Everything queued, and the close after it.
        mutating func take() -> [Item] {
            var items = frames.map(Item.frame)
            if let close { items.append(close) }
            frames = []
            bytes = 0
            return items
        }
    }

    private let state = Mutex(State())
    /// The most bytes queued for the writer.
    public let limitBytes: Int
    /// The most requests waiting for the loop.
    public let maxInFlight: Int

    public init(limitBytes: Int, maxInFlight: Int = WebSocketSettings.maxRequestsInFlight) {
        self.limitBytes = limitBytes
        self.maxInFlight = maxInFlight
    }

    // MARK: The loop's side

    /// Queues a frame for the writer, without waiting.
    func push(_ frame: [UInt8]) -> Pushed {
        let (result, writer, items) = state.withLock { s -> (Pushed, CheckedContinuation<[Item], Never>?, [Item]) in
            guard !s.finished, s.close == nil else { return (.gone, nil, []) }
            guard s.bytes + frame.count <= limitBytes else { return (.full, nil, []) }
            guard let writer = s.writer else {
                s.frames.append(frame)
                s.bytes += frame.count
                return (.queued, nil, [])
            }
            s.writer = nil
            return (.queued, writer, [.frame(frame)])
        }
        writer?.resume(returning: items)
        return result
    }

    /// Asks the writer to close the connection with `code` once what is queued before it has been written; frames
    /// pushed later are dropped. The action given to ``whenClosed(_:)`` runs, so that the gateway can also cut a
    /// connection whose writer is stuck behind a peer that does not read.
    public func close(code: UInt16, reason: String) {
        let (writer, items, action) = state.withLock {
            s -> (CheckedContinuation<[Item], Never>?, [Item], (@Sendable () -> Void)?) in
            guard !s.finished, s.close == nil else { return (nil, [], nil) }
            s.close = .close(code: code, reason: reason)
            let action = s.onClose
            s.onClose = nil
            guard let writer = s.writer else { return (nil, [], action) }
            s.writer = nil
            return (writer, s.take(), action)
        }
        writer?.resume(returning: items)
        action?()
    }

    /// Runs `action` when ``close(code:reason:)`` is first called.
    public func whenClosed(_ action: @escaping @Sendable () -> Void) {
        state.withLock { $0.onClose = action }
    }

    /// One of the connection's requests has been answered: the gateway may read another.
    func requestDone() {
        let reader = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.inFlight -= 1
            guard s.inFlight < maxInFlight, let reader = s.reader else { return nil }
            s.reader = nil
            return reader
        }
        reader?.resume()
    }

    // MARK: The gateway's side

    /// Waits for what to write: frames in order, maybe a close last; empty once the connection is finished.
    public func next() async -> [Item] {
        await withCheckedContinuation { (continuation: CheckedContinuation<[Item], Never>) in
            let items = state.withLock { s -> [Item]? in
                if s.finished { return [] }
                if s.frames.isEmpty && s.close == nil {
                    s.writer = continuation
                    return nil
                }
                return s.take()
            }
            if let items { continuation.resume(returning: items) }
        }
    }

    /// Waits until the connection may have one more request in the loop, and counts it.
    public func beginRequest() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { s -> Bool in
                s.inFlight += 1
                if s.inFlight <= maxInFlight || s.finished { return true }
                s.reader = continuation
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// The connection has ended: the writer and the reader stop waiting, and whatever is queued is freed.
    public func finish() {
        let (writer, reader) = state.withLock { s in
            s.finished = true
            s.frames = []
            s.bytes = 0
            s.onClose = nil
            defer { (s.writer, s.reader) = (nil, nil) }
            return (s.writer, s.reader)
        }
        writer?.resume(returning: [])
        reader?.resume()
    }

    /// Bytes queued for the writer now.
    public var queuedBytes: Int { state.withLock { $0.bytes } }
}
