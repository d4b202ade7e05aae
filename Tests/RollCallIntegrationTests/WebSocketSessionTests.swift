import Foundation
import Logging
import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallGateway
import RollCallWebSocketClient
import Synchronization
import Testing

extension Integration {
    @Suite("WebSocketSession (no libzmq)")
    struct WebSocketSessionTests {
        /// A WebSocketSession goes online, changes status and closes with bye, and a ZeroMQ subscriber sees each
        /// record, the same as a ZeroMQ query answers.
        @Test func sessionSeenOnZeroMQ() async throws {
            try await withGateway { gateway in
                let watch = try gateway.broker.subscriber("wsapp")
                let session = try await WebSocketSession(
                    url: gateway.url, token: gateway.token("wsapp"),
                    hello: .init(user: "wsapp".id, status: .busy, text: "on ws"))
                let online = try watch.expect("wsapp") { $0.status == .busy }
                #expect(online.text == "on ws")
                #expect(try gateway.broker.client().query(["wsapp".id])["wsapp".id]?.seq == online.seq)
                #expect(session.state == .live(session.granted.session))

                let started = ContinuousClock.now
                session.setStatus(.away, text: "later")
                let away = try watch.expect("wsapp") { $0.status == .away }
                print("status change seen on ZeroMQ \(milliseconds(since: started)) ms after setStatus")
                #expect(away.text == "later")

                await session.close()
                let offline = try watch.expect("wsapp") { $0.status == .offline }
                #expect(offline.reason == .bye)
                #expect(session.state == .closed)
            }
        }

        /// With a token provider, a session whose tokens live 3 s outlives them on one connection: it presents fresh
        /// tokens with `auth` before each expires, so it is never closed (4001) nor shown offline; without one, the
        /// same session is closed at its token's expiry.
        @Test func tokenProviderKeepsTheSessionPastExpiry() async throws {
            try await withGateway { gateway in
                let watch = try gateway.broker.subscriber("fresh")
                let minted = Atomic<Int>(0)
                let session = try await WebSocketSession(
                    url: gateway.url,
                    tokenProvider: {
                        minted.wrappingAdd(1, ordering: .relaxed)
                        return try await gateway.token("fresh", expiresIn: 3)
                    },
                    hello: .init(user: "fresh".id, keepAlive: .connection))
                _ = try watch.expect("fresh") { $0.status == .online }
                let records = try watch.collect(for: 7_000)
                print(
                    "7 s with 3 s tokens: \(minted.load(ordering: .relaxed)) tokens minted, records meanwhile: "
                        + "\(records.map { "\($0.status)" })")
                #expect(records.allSatisfy { $0.status != .offline })
                #expect(minted.load(ordering: .relaxed) >= 3)
                #expect(session.state == .live(session.granted.session))
                await session.close()
                let offline = try watch.expect("fresh") { $0.status == .offline }
                #expect(offline.reason == .bye)

                // The control: a fixed 3 s token is not renewed, and the connection it keeps alive ends with it.
                let fixed = try await WebSocketSession(
                    url: gateway.url, token: gateway.token("fixed", expiresIn: 3),
                    hello: .init(user: "fixed".id, keepAlive: .connection))
                let fixedWatch = try gateway.broker.subscriber("fixed")
                let ended = try fixedWatch.expect("fixed", timeout: 10_000) { $0.status == .offline }
                print("a fixed 3 s token: offline, reason \(ended.reason.map { "\($0)" } ?? "none")")
                #expect(ended.reason == .closed)
                await fixed.close()
            }
        }

        /// With the WebSocket endpoint stopped (every connection cut) and no grace period, a session kept alive by its
        /// connection goes offline (closed), backs off while the endpoint is down, and once it is back says hello
        /// again on its own and is online within 10 s of the cut.
        @Test func comesBackAfterTheConnectionIsCut() async throws {
            try await withBroker { broker in
                let (door, port, watch, session) = try await Self.phone("phone", on: broker)
                let first = session.granted.session

                let cut = ContinuousClock.now
                await door.stop()
                let offline = try watch.expect("phone", timeout: 5_000) { $0.status == .offline }
                #expect(offline.reason == .closed)
                // The endpoint stays down until the session has met a refused connection and is backing off.
                try await waitFor(timeout: 5_000) {
                    if case .reconnecting = session.state { return true }
                    return false
                }
                #expect(session.lastError != nil)
                print("while down: \(session.state), last error: \(session.lastError.map { "\($0)" } ?? "none")")
                _ = try await door.start(port: port)
                _ = try watch.expect("phone", timeout: 10_000) { $0.status == .online }
                let back = milliseconds(since: cut)
                print("online again \(back) ms after the endpoint was stopped and restarted (bound 10,000 ms)")
                #expect(back < 10_000)
                try await waitFor(timeout: 5_000) {
                    if case .live(let id) = session.state { return id != first }
                    return false
                }
                await session.close()
                #expect(try watch.expect("phone") { $0.status == .offline }.reason == .bye)
                await door.stop()
            }
        }

        /// With a grace period, a session whose connection is cut renews on a fresh connection within it: the same
        /// session, and no offline record at all, well past the grace period (unrenewed, it would end at 3 s).
        @Test func renewsWithinTheGracePeriod() async throws {
            try await withBroker({ $0.presence.offlineGraceMilliseconds = 3_000 }) { broker in
                let (door, port, watch, session) = try await Self.phone("tablet", on: broker)

                await door.stop()
                let cut = ContinuousClock.now
                _ = try await door.start(port: port)
                // The session's heartbeat on the fresh connection names it again; a ZeroMQ `query` cannot tell a
                // detached session from an attached one, so wait past the grace period and look for no offline.
                let records = try watch.collect(for: 4_500)
                print("records during and after the cut with a 3 s grace: \(records.map(\.status))")
                #expect(records.allSatisfy { $0.status != .offline })
                #expect(session.state == .live(session.granted.session))
                #expect(try broker.client().query(["tablet".id])["tablet".id]?.status == .online)
                print("renewed; checked \(milliseconds(since: cut)) ms after the cut")
                await session.close()
                await door.stop()
            }
        }

        /// A session following another user gets that user's current record first, then its changes, over its one
        /// connection, and again after the connection is cut and made anew (it subscribes on every connection).
        @Test func followsUsersOnItsConnection() async throws {
            try await withBroker { broker in
                let door = FrontDoor(broker: broker)
                let port = try await door.start(port: 0)
                let client = try broker.client()
                let peer = try client.hello(.init(user: "peer".id, status: .busy)).session
                let seen = Mutex<[PresenceRecord]>([])
                let session = try await WebSocketSession(
                    url: door.url(port), hello: .init(user: "me".id), following: ["peer".id],
                    onRecord: { record in seen.withLock { $0.append(record) } })
                try await waitFor(timeout: 5_000) { seen.withLock { $0.first?.status == .busy } }
                try client.setStatus(peer, .away, text: "lunch")
                try await waitFor(timeout: 5_000) { seen.withLock { $0.last?.text == "lunch" } }

                await door.stop()
                _ = try await door.start(port: port)
                try client.setStatus(peer, .online, text: "back")
                try await waitFor(timeout: 10_000) { seen.withLock { $0.last?.text == "back" } }
                let records = seen.withLock { $0 }
                print("records of peer: \(records.map { "\($0.status)/\($0.text ?? "-")" })")
                #expect(records.allSatisfy { $0.user == "peer".id })
                await session.close()
                await door.stop()
            }
        }

        /// A stoppable WebSocket endpoint on `broker`, a ZeroMQ subscriber of `user`, and `user`'s session kept
        /// alive by its connection, seen online.
        static func phone(_ user: String, on broker: InProcessBroker) async throws -> (
            FrontDoor, Int, PresenceSubscriber, WebSocketSession
        ) {
            let door = FrontDoor(broker: broker)
            let port = try await door.start(port: 0)
            let watch = try broker.subscriber(user)
            let session = try await WebSocketSession(
                url: door.url(port), hello: .init(user: user.id, keepAlive: .connection))
            try watch.expect(user) { $0.status == .online }
            return (door, port, watch, session)
        }
    }

    @Suite("rollcall online --ws")
    struct OnlineOverWebSocketTests {
        /// `rollcall online --ws URL --token T USER` (no libzmq) holds a session that `rollcall watch` over ZeroMQ
        /// sees online, and SIGINT says bye: offline, reason bye, exit 0.
        @Test func onlineOverWebSocketSeenByWatch() async throws {
            try await withGateway { gateway in
                let watch = try ChildProcess(
                    ChildProcess.rollcall,
                    [
                        "watch", "--command-endpoint", gateway.broker.command, "--update-endpoint",
                        gateway.broker.update, "kim",
                    ])
                defer { watch.terminate() }
                _ = try watch.waitForOutput(containing: #""user":"kim""#, timeout: 10_000)
                let online = try ChildProcess(
                    ChildProcess.rollcall,
                    [
                        "online", "--ws", gateway.url, "--token", try await gateway.token("kim"), "--status", "busy",
                        "--keepalive-connection", "kim",
                    ])
                defer { online.terminate() }
                _ = try online.waitForOutput(containing: "kim is busy", timeout: 10_000)
                _ = try watch.waitForOutput(containing: #""status":"busy""#, timeout: 10_000)
                online.signal(SIGINT)
                #expect(try online.waitForExit(timeout: 10_000) == 0)
                let line = try watch.waitForOutput(containing: #""reason":"bye""#, timeout: 10_000)
                print("watch saw: \(line)")
                #expect(line.contains(#""status":"offline""#))
            }
        }
    }
}

/// A WebSocket endpoint on a broker that a test can stop (cutting every connection) and start again on its port.
final class FrontDoor: Sendable {
    let broker: InProcessBroker
    private let running = Mutex<Task<Void, any Error>?>(nil)

    init(broker: InProcessBroker) { self.broker = broker }

    func url(_ port: Int) -> String { "ws://127.0.0.1:\(port)\(WebSocketServer.path)" }

    /// Starts the endpoint without tokens on `port` (0 for a free one) and returns its port once bound.
    func start(port: Int) async throws -> Int {
        var logger = Logger(label: "test-gateway")
        logger.logLevel = .critical
        let bound = Mutex<Int?>(nil)
        let server = try WebSocketServer(
            host: "127.0.0.1", port: port, gateway: broker.broker.gateway, verifier: nil, logger: logger
        ) { _, port in bound.withLock { $0 = port } }
        running.withLock { $0 = Task { try await server.run() } }
        let started = ContinuousClock.now
        while bound.withLock({ $0 }) == nil {
            guard ContinuousClock.now < started + .seconds(10) else {
                throw TestFailure("the WebSocket server did not start on port \(port)")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
        return bound.withLock { $0 }!
    }

    /// Stops the endpoint: its connections are closed.
    func stop() async {
        let task = running.withLock { task in
            defer { task = nil }
            return task
        }
        task?.cancel()
        _ = await task?.result
    }
}

/// Waits until `condition` holds, checking every 10 ms, failing after `timeout` ms.
private func waitFor(timeout: Int, _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .milliseconds(timeout)
    while !condition() {
        guard ContinuousClock.now < deadline else { throw TestFailure("condition not met within \(timeout) ms") }
        try await Task.sleep(for: .milliseconds(10))
    }
}
