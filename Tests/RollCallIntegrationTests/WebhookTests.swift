import Foundation
import Hummingbird
import Logging
import RollCallClient
import RollCallCore
import RollCallStore
import RollCallWebhooks
import ServiceLifecycle
import Synchronization
import Testing

/// A webhook receiver in the test, on a free loopback port: it checks every signature with the secret, records each
/// delivery, and answers 503 while ``failing`` is set, else 200.
final class WebhookReceiver: Sendable {
    struct Delivery: Sendable {
        var id: String
        var type: String
        var body: [UInt8]
        var signed: Bool
        var acknowledged: Bool

        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]) ?? [:] }
        /// `data`'s `key`.
        func data(_ key: String) -> Any? { (json["data"] as? [String: Any])?[key] }
    }

    let signer: StandardWebhookSigner
    let failing = Atomic<Bool>(false)
    private let received = Mutex<[Delivery]>([])

    init(secret: String) throws { signer = try StandardWebhookSigner(secret: secret) }

    var deliveries: [Delivery] { received.withLock { $0 } }

    /// The offsets of the acknowledged `presence.changed` events, in the order they came.
    var deliveredOffsets: [UInt64] {
        deliveries.filter { $0.acknowledged && $0.type == "presence.changed" }.flatMap(Self.offsets)
    }

    static func offsets(_ delivery: Delivery) -> [UInt64] {
        let events = delivery.data("events") as? [[String: Any]] ?? []
        return events.compactMap { ($0["offset"] as? NSNumber)?.uint64Value }
    }

    private func handle(_ request: Request) async throws -> Response {
        let bytes = Array(try await request.body.collect(upTo: 1 << 22).readableBytesView)
        var headers: [String: String] = [:]
        for field in request.headers { headers[field.name.canonicalName] = field.value }
        let id = headers["webhook-id"] ?? ""
        let signed =
            headers["webhook-timestamp"].flatMap(Int64.init).map {
                signer.signature(id: id, timestamp: $0, body: bytes) == headers["webhook-signature"]
            } ?? false
        let ok = !failing.load(ordering: .relaxed)
        var delivery = Delivery(id: id, type: "", body: bytes, signed: signed, acknowledged: ok)
        delivery.type = delivery.json["type"] as? String ?? ""
        received.withLock { $0.append(delivery) }
        return Response(status: ok ? .ok : .serviceUnavailable)
    }

    /// Runs `body` with the receiver at `http://127.0.0.1:PORT/hook`, stopped after, whatever happens.
    func serve(_ body: (String) async throws -> Void) async throws {
        let router = Router()
        router.post("hook") { request, _ in try await self.handle(request) }
        let port = Mutex<Int?>(nil)
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in port.withLock { $0 = channel.localAddress?.port } },
            logger: Logger(label: "receiver"))
        let group = ServiceGroup(configuration: .init(services: [app], logger: Logger(label: "receiver")))
        let server = Task { try await group.run() }
        do {
            try await waitFor(seconds: 10) { port.withLock { $0 } != nil }
            try await body("http://127.0.0.1:\(port.withLock { $0 }!)/hook")
        } catch {
            await group.triggerGracefulShutdown()
            _ = await server.result
            throw error
        }
        await group.triggerGracefulShutdown()
        _ = await server.result
    }
}

extension Integration {
    @Suite("Webhooks from a real broker: kill -9, offline_for on the test clock")
    struct WebhookTests {
        /// A secret file in the temporary directory, removed when the returned value's owner drops it.
        static func secretFile() throws -> (path: String, secret: String) {
            let secret = "whsec_" + Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("webhook-\(UUID()).secret").path
            try secret.write(toFile: path, atomically: true, encoding: .utf8)
            return (path, secret)
        }

        /// The `webhooks` rows of `/api/status` on the operations endpoint at `port`.
        static func statusRows(port: Int) throws -> [[String: Any]] {
            let body = try httpGet(port: port, "/api/status").body
            let status = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
            return status?["webhooks"] as? [[String: Any]] ?? []
        }

        /// A broker killed with kill -9 while its URL answers 503 delivers, once restarted on its data directory,
        /// every transition of the log in offset order; the first batch after the restart has the id it had before.
        @Test func killNineWithUndeliveredEvents() async throws {
            let (path, secret) = try Self.secretFile()
            defer { try? FileManager.default.removeItem(atPath: path) }
            let receiver = try WebhookReceiver(secret: secret)
            receiver.failing.store(true, ordering: .relaxed)
            try await receiver.serve { url in
                let broker = try ServeProcess(extra: [
                    "--test-mode", "--webhook-url", url, "--webhook-secret-file", path, "--webhook-batch-ms", "10",
                ])
                try broker.start()
                defer { _ = broker.signal(SIGKILL) }
                let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 2_000)
                let alice = try client.hello(.init(user: "alice".id)).session
                try client.bye(alice)
                _ = try client.hello(.init(user: "bob".id))
                _ = try client.call(.advance(milliseconds: 1_000))  // the store writes on the broker's clock
                let feed = try client.events(after: 0).entries.map(\.offset)
                #expect(feed.count == 3)
                // Killed once all three are in the log's file (a kill -9 may lose what is not) and a batch of them was
                // refused: it is in flight, its bounds saved.
                let log = try PresenceLog(directory: broker.dataDirectory)
                try await waitFor(seconds: 10) { (try? log.events(after: 0, limit: 10).map(\.offset)) == feed }
                try await waitFor(seconds: 10) { !receiver.deliveries.isEmpty }
                let refused = try #require(receiver.deliveries.first)
                #expect(!refused.acknowledged)

                _ = broker.signal(SIGKILL)
                receiver.failing.store(false, ordering: .relaxed)
                try broker.start()
                try await waitFor(seconds: 15) { receiver.deliveredOffsets.count >= feed.count }
                let after = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 2_000)
                #expect(receiver.deliveredOffsets == (try after.events(after: 0).entries.map(\.offset)))
                #expect(receiver.deliveredOffsets == feed)
                #expect(receiver.deliveries.first { $0.acknowledged }?.id == refused.id, "the same batch, the same id")
                #expect(receiver.deliveries.allSatisfy { $0.signed })
            }
        }

        /// The status page's data and /metrics show a URL that fails (its attempts, the last error, what waits)
        /// and then recovers (acknowledged up to the newest offset, batches delivered, nothing failing).
        @Test func statusPageAndMetricsFollowAURL() async throws {
            let (path, secret) = try Self.secretFile()
            defer { try? FileManager.default.removeItem(atPath: path) }
            let receiver = try WebhookReceiver(secret: secret)
            receiver.failing.store(true, ordering: .relaxed)
            try await receiver.serve { url in
                let data = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
                defer { try? FileManager.default.removeItem(atPath: data) }
                let child = try ChildProcess(
                    ChildProcess.rollcall,
                    [
                        "serve", "--data-dir", data, "--command-endpoint", "tcp://127.0.0.1:*", "--update-endpoint",
                        "tcp://127.0.0.1:*", "--http-endpoint", "127.0.0.1:0", "--print-endpoints",
                        "--webhook-url", url, "--webhook-secret-file", path, "--webhook-batch-ms", "10",
                    ])
                defer { child.terminate() }
                let line = try child.waitForOutput(containing: #""http":"#)
                let endpoints = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                let port = try #require(Int((endpoints["http"] as? String)?.split(separator: ":").last ?? ""))
                let client = try CommandClient(endpoint: try #require(endpoints["command"] as? String))
                func hook() throws -> [String: Any]? { try Self.statusRows(port: port).first }
                func deliveries(_ result: String) throws -> Double {
                    let samples = try parsePrometheus(httpGet(port: port, "/metrics").body)
                    let labels = #"url="\#(url)",type="presence.changed",result="\#(result)""#
                    return samples["rollcall_webhook_deliveries_total{\(labels)}"] ?? 0
                }

                _ = try client.hello(.init(user: "alice".id))
                try await waitFor(seconds: 10) {
                    let row = try? hook()
                    return (row?["failures"] as? Int ?? 0) >= 1 && (row?["pending"] as? Int ?? 0) >= 1
                }
                let failing = try #require(try hook())
                #expect(failing["url"] as? String == url)
                #expect(failing["type"] as? String == "presence.changed")
                #expect(failing["last_error"] as? String == "HTTP 503")
                #expect(failing["delivered_batches"] as? Int == 0)
                #expect(failing["delivering"] as? Bool == true, "a single broker delivers every URL")
                #expect(failing["holder"] is NSNull, "a single broker names no holder")
                #expect(try deliveries("http_error") >= 1)
                #expect(try deliveries("ok") == 0)

                receiver.failing.store(false, ordering: .relaxed)
                let newest = try #require(try client.events(after: 0).entries.last?.offset)
                try await waitFor(seconds: 15) {
                    let row = try? hook()
                    return (row?["acknowledged"] as? NSNumber)?.uint64Value == newest && row?["failures"] as? Int == 0
                }
                let healthy = try #require(try hook())
                #expect((healthy["delivered_batches"] as? Int ?? 0) >= 1)
                #expect(receiver.deliveredOffsets.last == newest)
                #expect(try deliveries("ok") >= 1)
                let page = try httpGet(port: port, "/").body
                #expect(page.contains("id=\"webhooks\""))
            }
        }

        /// With --webhook-offline-after-ms, a user who stays offline gets one presence.offline_for once the test
        /// clock passes the deadline; one who comes back within it gets none.
        @Test func offlineForOnTheTestClock() async throws {
            let (path, secret) = try Self.secretFile()
            defer { try? FileManager.default.removeItem(atPath: path) }
            let receiver = try WebhookReceiver(secret: secret)
            try await receiver.serve { url in
                let broker = try ServeProcess(extra: [
                    "--test-mode", "--webhook-url", url, "--webhook-secret-file", path, "--webhook-batch-ms", "10",
                    "--webhook-offline-after-ms", "5000",
                ])
                try broker.start()
                defer { _ = broker.signal(SIGTERM) }
                let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 2_000)
                let ttl: Int64 = 3_600_000
                let alice = try client.hello(.init(user: "alice".id, ttlMilliseconds: ttl)).session
                let bob = try client.hello(.init(user: "bob".id, ttlMilliseconds: ttl)).session
                _ = try client.call(.advance(milliseconds: 100))
                try client.bye(alice)
                try client.bye(bob)
                _ = try client.call(.advance(milliseconds: 2_000))
                _ = try client.hello(.init(user: "bob".id, ttlMilliseconds: ttl))  // back within 5 s
                _ = try client.call(.advance(milliseconds: 1_000))
                #expect(receiver.deliveries.allSatisfy { $0.type == "presence.changed" }, "no deadline passed yet")
                _ = try client.call(.advance(milliseconds: 10_000))
                try await waitFor(seconds: 10) { receiver.deliveries.contains { $0.type == "presence.offline_for" } }
                // carol goes offline later: once hers is in, bob's would have come before it (the stream is in order).
                let carol = try client.hello(.init(user: "carol".id, ttlMilliseconds: ttl)).session
                try client.bye(carol)
                _ = try client.call(.advance(milliseconds: 10_000))
                try await waitFor(seconds: 10) {
                    receiver.deliveries.filter { $0.type == "presence.offline_for" }.count >= 2
                }
                let offline = receiver.deliveries.filter { $0.type == "presence.offline_for" }
                let users = offline.map { $0.data("user") as? String }
                #expect(users == ["alice", "carol"])
                #expect(offline.allSatisfy { $0.signed && $0.id.hasPrefix("msg_offline_") })
                #expect(offline.allSatisfy { $0.data("offline_ms") as? Int == 5_000 })
            }
        }
    }
}
