import Foundation
import Logging
import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallStore
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

/// A broker in this process that can be stopped and started again on the same endpoints.
final class RestartableBroker {
    var configuration: BrokerConfiguration
    private var broker: Broker?
    private var task: Task<Void, Error>?

    init(_ configure: (inout BrokerConfiguration) -> Void = { _ in }) {
        configuration = BrokerConfiguration()
        configuration.commandEndpoint = "tcp://127.0.0.1:*"
        configuration.updateEndpoint = "tcp://127.0.0.1:*"
        configure(&configuration)
    }

    var command: String { configuration.commandEndpoint }
    var update: String { configuration.updateEndpoint }
    var epoch: String? { broker?.epoch }

    /// Starts a broker; after the first start, on the endpoints the first one bound.
    func start() async throws {
        var logger = Logger(label: "restartable-broker")
        logger.logLevel = .critical
        let broker = try Broker(configuration: configuration, logger: logger)
        configuration.commandEndpoint = broker.commandEndpoint
        configuration.updateEndpoint = broker.updateEndpoint
        self.broker = broker
        task = Task { try await broker.run() }
        let started = ContinuousClock.now
        while !broker.isRunning {
            guard ContinuousClock.now < started + .seconds(10) else {
                throw TestFailure("the broker's loop did not start")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    func stop() async throws {
        broker?.stop()
        try await task?.value
        broker = nil
        task = nil
    }
}

extension Integration {
    @Suite("Broker heartbeat and restarts")
    struct RestartTests {
        /// The broker publishes its heartbeat on broker/ at once to a new subscriber and then every interval, with
        /// its epoch and counts.
        @Test func brokerHeartbeat() async throws {
            try await withBroker({ $0.brokerHeartbeatMilliseconds = 100 }) { broker in
                let client = try broker.client()
                _ = try client.hello(.init(user: "ann".id))
                _ = try client.hello(.init(user: "ann".id, status: .away))
                _ = try client.hello(.init(user: "ben".id, status: .offline))
                let context = try Context()
                let sub = try rawSocket(.sub, broker.update, context: context)
                try sub.set(.subscribe(Array("broker/".utf8)))
                let first = try Codec.decodeBrokerHeartbeat(try #require(try sub.receive(timeout: 1_000))[1])
                #expect(first.epoch == broker.broker.epoch)
                #expect(first.usersAvailable == 1 && first.sessions == 3 && first.intervalMilliseconds == 100)
                let start = ContinuousClock.now
                var count = 0
                while ContinuousClock.now < start + .milliseconds(550) {
                    if try sub.receive(timeout: 50) != nil { count += 1 }
                }
                #expect(count >= 4 && count <= 7)
            }
        }

        /// A watcher reports the broker connected, lost when its heartbeat stops, and restarted with a new epoch
        /// when a new broker comes up on the same endpoints; a followed user's state arrives again after it.
        @Test func watcherSeesLossAndRestart() async throws {
            let broker = RestartableBroker { $0.brokerHeartbeatMilliseconds = 100 }
            try await broker.start()
            let firstEpoch = broker.epoch!
            let events = Mutex<[PresenceWatcher.BrokerEvent]>([])
            let records = Mutex<[PresenceRecord]>([])
            let watcher = try PresenceWatcher(endpoint: broker.update)
            defer { watcher.close() }
            _ = watcher.observeBroker { event in events.withLock { $0.append(event) } }
            _ = watcher.observe("ann".id) { record in records.withLock { $0.append(record) } }
            try await waitFor { events.withLock { $0 } == [.connected(epoch: firstEpoch)] }

            try await broker.stop()
            let stopped = ContinuousClock.now
            try await waitFor { events.withLock { $0.last } == .lost }
            print("watcher: broker loss noticed after \(Int(milliseconds(since: stopped))) ms (heartbeat 100 ms)")
            #expect(milliseconds(since: stopped) < 100 * 3 + 200)

            let before = records.withLock { $0.count }
            try await broker.start()
            let secondEpoch = broker.epoch!
            #expect(secondEpoch != firstEpoch)
            try await waitFor(seconds: 5) { events.withLock { $0.last } == .restarted(epoch: secondEpoch) }
            try await waitFor(seconds: 5) { records.withLock { $0.count } > before }  // resubscribed: last value
            try await broker.stop()
        }

        /// A PresenceSession rides through a broker restart: it says hello again on its own with the status the
        /// application asked for last, also one set while the broker was down.
        @Test func sessionRidesThroughARestart() async throws {
            let broker = RestartableBroker { $0.presence.minTTLMilliseconds = 100 }
            try await broker.start()
            let states = Mutex<[PresenceSession.State]>([])
            let session = try PresenceSession(
                endpoint: broker.command, hello: .init(user: "cleo".id, ttlMilliseconds: 600), timeoutMilliseconds: 300
            ) { state in states.withLock { $0.append(state) } }
            defer { session.close() }

            try await broker.stop()
            try await waitFor(seconds: 3) {
                states.withLock { $0.contains { if case .reconnecting = $0 { true } else { false } } }
            }
            session.setStatus(.busy, text: "back soon")  // while the broker is down
            try await broker.start()
            let restarted = ContinuousClock.now
            let client = try CommandClient(endpoint: broker.command)
            try await waitFor(seconds: 5) {
                (try? client.query(["cleo".id]))?["cleo".id]?.status == .busy
            }
            print("session: back on the restarted broker \(Int(milliseconds(since: restarted))) ms after it started")
            #expect(try client.query(["cleo".id])["cleo".id]?.text == "back soon")
            if case .live(let id) = session.state {
                #expect(id != session.granted.session)
            } else {
                Issue.record("session is \(session.state)")
            }
            try await broker.stop()
        }
    }
}

/// Waits until `condition` holds, checking every 10 ms, failing after `seconds`.
func waitFor(seconds: Double = 3, _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
    while !condition() {
        guard ContinuousClock.now < deadline else { throw TestFailure("condition not met within \(seconds) s") }
        pause(milliseconds: 10)
    }
}

extension Integration {
    @Suite("Restarts keep state")
    struct KeptStateTests {
        /// A restart shorter than the TTL never shows a connected user offline; a user whose client is gone is
        /// published offline with reason restart one TTL after the broker is back; groups and seqs survive.
        @Test func restartShorterThanTheTTL() async throws {
            let store = MemoryStore()
            let broker = RestartableBroker {
                $0.storage = .store(store)
                $0.presence.minTTLMilliseconds = 100
                $0.presence.defaultTTLMilliseconds = 1_500
                $0.writeIntervalMilliseconds = 50
            }
            try await broker.start()
            let session = try PresenceSession(
                endpoint: broker.command, hello: .init(user: "stay".id, status: .busy), timeoutMilliseconds: 200)
            defer { session.close() }
            let client = try CommandClient(endpoint: broker.command)
            _ = try client.hello(.init(user: "leave".id))
            _ = try client.group("g".group, GroupEdit(members: ["stay".id, "leave".id, "never".id]))
            let before = try client.query(["stay".id, "leave".id])
            try await waitFor {  // written
                let state = store.load()
                return Set(state.records.map(\.user)).isSuperset(of: ["stay".id, "leave".id])
                    && state.groups.contains { $0.group == "g".group }
            }

            let watcher = try PresenceWatcher(endpoint: broker.update)
            defer { watcher.close() }
            let seen = Mutex<[PresenceRecord]>([])
            for user in ["stay", "leave"] { _ = watcher.observe(user.id) { r in seen.withLock { $0.append(r) } } }
            try await waitFor { seen.withLock { $0.count } >= 2 }

            try await broker.stop()
            try await broker.start()
            let started = ContinuousClock.now
            let after = try CommandClient(endpoint: broker.command)
            #expect(try after.group("g".group).counts == StatusCounts(online: 1, busy: 1, offline: 1))
            try await waitFor(seconds: 4) { seen.withLock { $0.contains { $0.reason == .restart } } }
            let elapsed = milliseconds(since: started)
            print("restart: a user who did not come back went offline \(Int(elapsed)) ms after the restart (ttl 1500)")
            #expect(elapsed >= 1_400 && elapsed < 1_500 + 300)
            let records = seen.withLock { $0 }
            #expect(!records.contains { $0.user == "stay".id && $0.status == .offline })
            #expect(records.filter { $0.status == .offline }.map(\.user) == ["leave".id])
            let now = try after.query(["stay".id, "leave".id])
            #expect(now["stay".id]?.status == .busy)
            #expect(now["stay".id]!.seq >= before["stay".id]!.seq)
            #expect(now["leave".id]!.seq > before["leave".id]!.seq)
            try await broker.stop()
        }

        /// A graceful stop loses nothing: a change made just before it is there after the restart.
        @Test func gracefulStopLosesNothing() async throws {
            let store = MemoryStore()
            let broker = RestartableBroker {
                $0.storage = .store(store)
                $0.writeIntervalMilliseconds = 60_000  // only the final flush can save it
            }
            try await broker.start()
            let client = try CommandClient(endpoint: broker.command)
            let session = try client.hello(.init(user: "ann".id)).session
            try client.setStatus(session, .away, text: "last words")
            _ = try client.group("g".group, GroupEdit(members: ["ann".id]))
            try await broker.stop()
            try await broker.start()
            let again = try CommandClient(endpoint: broker.command)
            let record = try again.query(["ann".id])["ann".id]
            #expect(record?.status == .away && record?.text == "last words")
            #expect(try again.group("g".group).members.map(\.user) == ["ann".id])
            try await broker.stop()
        }
    }
}
