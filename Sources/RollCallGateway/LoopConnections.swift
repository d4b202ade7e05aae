import NIOCore
import RollCallBroker
import Synchronization

/// One server's upgraded connections on one SwiftNIO event loop, touched only on that loop: one timer pings them
/// all every `--ws-ping-ms` (rather than a timer per connection), and stopping the server closes them. In test mode
/// there is no timer: ``ConnectionTables`` calls ``tick()`` as the broker's clock moves.
final class LoopConnections {
    private let eventLoop: any EventLoop
    /// `nil` when the broker's test clock drives the pings.
    private let interval: TimeAmount?
    private var handlers: [ObjectIdentifier: GatewayHandler] = [:]
    private var timer: RepeatedTask?
    private var stopped = false

    init(eventLoop: any EventLoop, interval: TimeAmount?) {
        self.eventLoop = eventLoop
        self.interval = interval
    }

    /// Keeps `handler` until ``remove(_:)``; `false` if the server has stopped.
    func add(_ handler: GatewayHandler) -> Bool {
        guard !stopped else { return false }
        handlers[ObjectIdentifier(handler)] = handler
        if timer == nil, let interval {
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

    /// A round of pings: each connection pings its peer, or cuts it if it has been silent since the last round.
    func tick() {
        guard !stopped else { return }
        for handler in Array(handlers.values) { handler.ping() }
    }

    /// A reload of the key file, or a good fetch of the JWKS URL, took `revoked` away: each connection whose token
    /// one of them checked is closed (4003).
    func revoke(_ revoked: RevokedKeys) {
        for handler in Array(handlers.values) { handler.revoke(revoked) }
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
    /// With the test clock: its rounds of pings.
    private let testRounds = Mutex<TestClockPings?>(nil)

    /// Pings every `interval` on SwiftNIO's timers; with `testClock`, every `interval` of the broker's test clock
    /// instead (``TestClockPings``), so that `advance` reaches a silent peer's cut.
    init(interval: TimeAmount, testClock: TestClockSignal? = nil, answerWindow: Duration = .milliseconds(100)) {
        self.interval = interval
        guard let testClock else { return }
        let start = testClock.observe { [weak self] time in self?.clockMoved(to: time.milliseconds) }
        testRounds.withLock {
            $0 = TestClockPings(
                start: start.milliseconds, intervalMilliseconds: interval.nanoseconds / 1_000_000,
                answerWindow: answerWindow)
        }
    }

    private func clockMoved(to time: Int64) {
        carryOut(testRounds.withLock { $0?.clockMoved(to: time, now: .now) } ?? .nothing)
    }

    private func carryOut(_ action: TestClockPings.Action) {
        switch action {
        case .roundNow: pingRound()
        case .roundAfter(let wait):
            Task { [weak self] in
                try? await Task.sleep(for: wait)
                self?.pingRound()
            }
        case .nothing: break
        }
    }

    /// One round of pings on every loop, then the next if one waits.
    private func pingRound() {
        for table in tables.withLock({ Array($0.values) }) {
            table.eventLoop.execute { table.value.tick() }
        }
        carryOut(testRounds.withLock { $0?.roundDone(now: .now) } ?? .nothing)
    }

    /// The table of `eventLoop`; call on it.
    func table(on eventLoop: any EventLoop) -> LoopConnections {
        let bound = tables.withLock { tables in
            let key = ObjectIdentifier(eventLoop)
            if let table = tables[key] { return table }
            let timer = testRounds.withLock { $0 == nil } ? interval : nil
            let table = NIOLoopBound(LoopConnections(eventLoop: eventLoop, interval: timer), eventLoop: eventLoop)
            tables[key] = table
            return table
        }
        let table = bound.value
        if stopped.load(ordering: .relaxed) { table.stop() }
        return table
    }

    /// Closes, on every loop, the connections whose token a key in `revoked` checked (4003; their sessions end,
    /// reason `revoked`).
    func revoke(_ revoked: RevokedKeys) {
        for table in tables.withLock({ Array($0.values) }) {
            table.eventLoop.execute { table.value.revoke(revoked) }
        }
    }

    /// Closes every connection of every loop (1001, cut after ``GatewayHandler/cutAfter`` if it does not answer).
    func stopAll() {
        stopped.store(true, ordering: .relaxed)
        for table in tables.withLock({ Array($0.values) }) {
            table.eventLoop.execute { table.value.stop() }
        }
    }
}
