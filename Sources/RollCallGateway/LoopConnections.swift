import NIOCore
import Synchronization

/// One server's upgraded connections on one SwiftNIO event loop, touched only on that loop: one timer pings them
/// all every `--ws-ping-ms` (rather than a timer per connection), and stopping the server closes them.
final class LoopConnections {
    private let eventLoop: any EventLoop
    private let interval: TimeAmount
    private var handlers: [ObjectIdentifier: GatewayHandler] = [:]
    private var timer: RepeatedTask?
    private var stopped = false

    init(eventLoop: any EventLoop, interval: TimeAmount) {
        self.eventLoop = eventLoop
        self.interval = interval
    }

    /// Keeps `handler` until ``remove(_:)``; `false` if the server has stopped.
    func add(_ handler: GatewayHandler) -> Bool {
        guard !stopped else { return false }
        handlers[ObjectIdentifier(handler)] = handler
        if timer == nil {
            let bound = NIOLoopBound(self, eventLoop: eventLoop)
            timer = eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
                bound.value.tick()
            }
        }
        return true
    }

    func remove(_ handler: GatewayHandler) {
        handlers[ObjectIdentifier(handler)] = nil
    }

    private func tick() {
        for handler in Array(handlers.values) { handler.ping() }
    }

    /// The server stops: every connection is asked to close (1001), and no new one is kept.
    func stop() {
        stopped = true
        timer?.cancel()
        timer = nil
        for handler in Array(handlers.values) { handler.serverStopping() }
    }
}

/// One server's ``LoopConnections``, one per event loop its connections live on.
final class ConnectionTables: Sendable {
    private let tables = Mutex<[ObjectIdentifier: NIOLoopBound<LoopConnections>]>([:])
    private let stopped = Atomic<Bool>(false)
    private let interval: TimeAmount

    init(interval: TimeAmount) { self.interval = interval }

    /// The table of `eventLoop`; call on it.
    func table(on eventLoop: any EventLoop) -> LoopConnections {
        let bound = tables.withLock { tables in
            let key = ObjectIdentifier(eventLoop)
            if let table = tables[key] { return table }
            let table = NIOLoopBound(LoopConnections(eventLoop: eventLoop, interval: interval), eventLoop: eventLoop)
            tables[key] = table
            return table
        }
        let table = bound.value
        if stopped.load(ordering: .relaxed) { table.stop() }
        return table
    }

    /// Closes every connection of every loop (1001, cut after ``GatewayHandler/cutAfter`` if it does not answer).
    func stopAll() {
        stopped.store(true, ordering: .relaxed)
        for table in tables.withLock({ Array($0.values) }) {
            table.eventLoop.execute { table.value.stop() }
        }
    }
}
