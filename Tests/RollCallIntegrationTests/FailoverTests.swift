import Foundation
import RollCallClient
import RollCallCore
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

/// Whether `user` is online (any available status, at least one session) on the broker at `endpoint`.
private func record(of user: String, at endpoint: String) -> PresenceRecord? {
    (try? CommandClient(endpoint: endpoint, timeoutMilliseconds: 500).query([user.id]))?[user.id]
}

/// A fake node on a free loopback port that answers as a cluster node cut off from etcd would: `hello` is granted
/// while `grants` lasts (a heartbeat interval of 200 ms), and every request after that is answered
/// `cluster_unavailable`. A fake, so that the refusal comes at a
/// moment the test chooses; a real node sends it when cut off from etcd (`ClusterTests.aCutOffNodeSaysSoAndComesBack`).
private final class UnavailableNode: Sendable {
    let endpoint: String
    private let stopped = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    /// When the first `cluster_unavailable` went out, if one did.
    let firstRefusal = Mutex<ContinuousClock.Instant?>(nil)

    init(grants: Int) throws {
        let context = try Context.shared()
        let router = try Socket(context, .router)
        try router.set(.linger(milliseconds: 0))
        try router.bind("tcp://127.0.0.1:*")
        endpoint = try router.lastEndpoint()
        let handOff = HandOff(router)
        Thread { [self] in
            let router = handOff.take()
            defer {
                router.close()
                finished.signal()
            }
            var left = grants
            var poller = Poller([router])
            while !stopped.load(ordering: .relaxed) {
                guard (try? poller.poll(timeout: 20))?[0] == true else { continue }
                while let message = try? router.receiveMessage(), message.frames.count == 2 {
                    let (peer, body) = (message.frames[0].bytes, message.frames[1].bytes)
                    guard case .object(let fields)? = try? JSONParser.parse(body) else { continue }
                    var id = "null"
                    if case .number(let text)? = fields["id"] { id = text }
                    let reply: String
                    if fields["op"]?.string == "hello" && left > 0 {
                        left -= 1
                        reply = #"{"ok":true,"id":\#(id),"session":"fake-\#(left)","heartbeat_ms":200,"ttl_ms":600}"#
                    } else {
                        firstRefusal.withLock { $0 = $0 ?? .now }
                        reply =
                            #"{"ok":false,"id":\#(id),"error":{"code":"cluster_unavailable","#
                            + #""message":"this node cannot reach the cluster's store now"}}"#
                    }
                    _ = try? router.send(message: [peer, Array(reply.utf8)])
                }
            }
        }.start()
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        finished.wait()
    }
}

extension Integration {
    @Suite("Fail-over between command endpoints")
    struct FailoverTests {
        /// A session given two brokers' endpoints whose broker is killed (-9) is live on the other within 2 s: the
        /// user online there with the status and text asked for last and the same device, under a new session.
        @Test func sessionMovesToTheOtherBrokerWhenItsBrokerIsKilled() async throws {
            let first = try ServeProcess()
            let second = try ServeProcess()
            try first.start()
            try second.start()
            let states = Mutex<[PresenceSession.State]>([])
            let session = try PresenceSession(
                endpoints: [first.command, second.command],
                hello: .init(user: "fay".id, device: "laptop", status: .busy, text: "first"),
                timeoutMilliseconds: 1_000, onState: { state in states.withLock { $0.append(state) } })
            defer { session.close() }
            #expect(session.endpoint == first.command)
            session.setStatus(.away, text: "lunch")
            try await waitFor(seconds: 3) { record(of: "fay", at: first.command)?.status == .away }
            #expect((record(of: "fay", at: second.command)?.sessions ?? 0) == 0)

            let killed = ContinuousClock.now
            #expect(first.signal(SIGKILL) != nil)
            try await waitFor(seconds: 10) {
                let there = record(of: "fay", at: second.command)
                return there?.status == .away && there?.sessions == 1
            }
            let moved = milliseconds(since: killed)
            let there = record(of: "fay", at: second.command)
            print(
                "kill -9 of the session's broker: live on the other broker, user online there, after \(Int(moved)) ms")
            #expect(moved < 2_000)
            #expect(there?.text == "lunch")
            #expect(session.endpoint == second.command)
            #expect(session.state == .live(session.session))
            #expect(session.session != session.granted.session)
            #expect(states.withLock { $0 }.contains { if case .reconnecting = $0 { true } else { false } })
        }

        /// A session whose first endpoint does not answer at all says hello on the next one, within one timeout.
        @Test func sessionStartsOnTheFirstEndpointThatAnswers() async throws {
            let dead = try freeEndpoint()
            try await withBroker { broker in
                let start = ContinuousClock.now
                let session = try PresenceSession(
                    endpoints: [dead, broker.command], hello: .init(user: "gus".id), timeoutMilliseconds: 500)
                defer { session.close() }
                let took = milliseconds(since: start)
                print("hello past an endpoint with nothing behind it: live on the next after \(Int(took)) ms")
                #expect(session.endpoint == broker.command)
                #expect(record(of: "gus", at: broker.command)?.sessions == 1)
                #expect(took < 500 + 1_000)
            }
        }

        /// A live session whose node answers `cluster_unavailable` moves to the next endpoint and is live there
        /// within 1 s; so does a first hello answered that way. (A fake node sends the code, at a moment the test chooses.)
        @Test func clusterUnavailableMovesTheSessionOn() async throws {
            try await withBroker { broker in
                let fake = try UnavailableNode(grants: 1)
                defer { fake.stop() }
                let session = try PresenceSession(
                    endpoints: [fake.endpoint, broker.command], hello: .init(user: "hal".id, status: .busy),
                    timeoutMilliseconds: 1_000)
                defer { session.close() }
                #expect(session.endpoint == fake.endpoint)
                #expect(session.granted.session == SessionID("fake-0"))
                try await waitFor(seconds: 5) { record(of: "hal", at: broker.command)?.status == .busy }
                let refused = try #require(fake.firstRefusal.withLock { $0 })
                let moved = milliseconds(since: refused)
                print("cluster_unavailable to a heartbeat: live on the next endpoint \(Int(moved)) ms later")
                #expect(moved < 1_000)
                #expect(session.endpoint == broker.command)
                #expect(
                    session.lastError
                        == .unanswered("cluster_unavailable: this node cannot reach the cluster's store now"))

                // A hello answered cluster_unavailable: the next endpoint at once, for a session and a client.
                let start = ContinuousClock.now
                let other = try PresenceSession(
                    endpoints: [fake.endpoint, broker.command], hello: .init(user: "ida".id),
                    timeoutMilliseconds: 1_000)
                defer { other.close() }
                #expect(other.endpoint == broker.command)
                #expect(milliseconds(since: start) < 1_000)
                let client = try CommandClient(endpoints: [fake.endpoint, broker.command], timeoutMilliseconds: 1_000)
                #expect(try client.query(["ida".id])["ida".id]?.sessions == 1)
                #expect(client.endpoint == broker.command)
                let alone = try CommandClient(endpoint: fake.endpoint, timeoutMilliseconds: 1_000)
                #expect(
                    throws: ClientError.rejected(
                        PresenceError(.clusterUnavailable, "this node cannot reach the cluster's store now"))
                ) {
                    try alone.query(["ida".id])
                }
            }
        }

        /// `rollcall online` given two brokers (ROLLCALL_COMMAND_ENDPOINT as a comma list) says which it is on,
        /// and after a kill -9 of that one is online on the other within 2 s and says so; `rollcall query` with a
        /// dead first endpoint answers from the next.
        @Test func onlineFailsOverAsAChildProcess() async throws {
            let first = try ServeProcess()
            let second = try ServeProcess()
            try first.start()
            try second.start()
            let online = try ChildProcess(
                ChildProcess.rollcall, ["online", "jo", "--status", "busy", "--text", "desk"],
                environment: ["ROLLCALL_COMMAND_ENDPOINT": "\(first.command),\(second.command)"])
            defer { online.terminate() }
            try online.waitForOutput(containing: "jo is busy on \(first.command)")
            try await waitFor(seconds: 3) { record(of: "jo", at: first.command)?.status == .busy }

            let killed = ContinuousClock.now
            #expect(first.signal(SIGKILL) != nil)
            do {
                try await waitFor(seconds: 10) { record(of: "jo", at: second.command)?.status == .busy }
            } catch {
                throw TestFailure("jo is not busy on the other broker: \(online.stdout) \(online.stderr)")
            }
            let moved = milliseconds(since: killed)
            try online.waitForOutput(containing: "jo is on \(second.command)")
            print("kill -9 under rollcall online: online on the other broker after \(Int(moved)) ms")
            #expect(moved < 2_000)
            #expect(record(of: "jo", at: second.command)?.text == "desk")

            let query = try ChildProcess(
                ChildProcess.rollcall,
                ["query", "jo", "--command-endpoint", first.command, "--command-endpoint", second.command])
            #expect(try query.waitForExit(timeout: 10_000) == 0)
            #expect(query.stdout.contains(#""status":"busy""#))

            online.signal(SIGINT)
            #expect(try online.waitForExit(timeout: 5_000) == 0)
            #expect(record(of: "jo", at: second.command)?.status == .offline)
        }
    }
}
