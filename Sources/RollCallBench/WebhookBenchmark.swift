import Foundation
import Hummingbird
import Logging
import RollCallTestSupport
import RollCallWire
import ServiceLifecycle
import Synchronization

/// Webhook delivery measured end to end (docs/webhooks.md): a real `rollcall serve` with a data directory POSTs its
/// presence log to a receiver in this process, over loopback HTTP.
extension PresenceBenchmarks {
    /// What the receiver saw: events, and each event's delay from the status change that made it (its `text` holds
    /// the sender's monotonic stamp).
    final class WebhookReceiver: Sendable {
        private struct State {
            var events = 0
            var posts = 0
            var lastArrival: UInt64 = 0
            var histogram = LatencyHistogram()
        }
        private let state = Mutex(State())

        var events: Int { state.withLock { $0.events } }
        var snapshot: (events: Int, posts: Int, lastArrival: UInt64, histogram: LatencyHistogram) {
            state.withLock { ($0.events, $0.posts, $0.lastArrival, $0.histogram) }
        }

        func reset() { state.withLock { $0 = State() } }

        /// Writes a new `whsec_` secret of 32 random bytes to `path`, for `--webhook-secret-file`.
        static func writeSecret(to path: String) throws {
            var key = [UInt8](repeating: 0, count: 32)
            for index in key.indices { key[index] = UInt8.random(in: 0...255) }
            try Data(("whsec_" + Data(key).base64EncodedString()).utf8).write(to: URL(fileURLWithPath: path))
        }

        /// Waits until `count` events came, or none for `quiet`; returns how many came.
        func waitForEvents(_ count: Int, quiet: Duration) -> Int { waitForCount(count, quiet: quiet) { events } }

        func handle(_ request: Request) async throws -> Response {
            let body = try await request.body.collect(upTo: 1 << 24)
            let now = monotonicNanoseconds()
            guard case .object(let fields) = try JSONParser.parse(Array(body.readableBytesView)),
                case .object(let data)? = fields[JSONKey("data")], case .array(let events)? = data[JSONKey("events")]
            else { return Response(status: .ok) }
            var delays: [UInt64] = []
            for event in events {
                guard case .object(let entry) = event, case .object(let record)? = entry[JSONKey("record")],
                    let text = record[JSONKey("text")]?.string, text.hasPrefix("b"),
                    let stamp = UInt64(text.dropFirst())
                else { continue }
                delays.append(now > stamp ? (now - stamp) / 1_000 : 0)
            }
            state.withLock { state in
                state.posts += 1
                state.events += events.count
                state.lastArrival = now
                for delay in delays { state.histogram.record(microseconds: delay) }
            }
            return Response(status: .ok)
        }

        /// Runs `body` with the receiver on a free port of 127.0.0.1, handing it the URL.
        func serve<T>(_ body: (String) async throws -> T) async throws -> T {
            let router = Router()
            router.post("hook") { request, _ in try await self.handle(request) }
            let bound = Mutex<Int?>(nil)
            var logger = Logger(label: "webhook-receiver")
            logger.logLevel = .critical
            let app = Application(
                router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { channel in bound.withLock { $0 = channel.localAddress?.port } }, logger: logger)
            let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
            let server = Task { try await group.run() }
            defer { server.cancel() }
            let deadline = ContinuousClock.now + .seconds(10)
            while bound.withLock({ $0 }) == nil {
                guard ContinuousClock.now < deadline else { throw BenchError("the webhook receiver did not listen") }
                try await Task.sleep(for: .milliseconds(10))
            }
            do {
                let result = try await body("http://127.0.0.1:\(bound.withLock { $0 }!)/hook")
                await group.triggerGracefulShutdown()
                _ = await server.result
                return result
            } catch {
                await group.triggerGracefulShutdown()
                _ = await server.result
                throw error
            }
        }
    }

    /// Transition → webhook latency at each of `rates` for `seconds`, and delivered events per second when changes
    /// come as fast as the broker takes them (`burst` changes), with the default batching (100 events, 50 ms).
    public func webhooks(rates: [Int], seconds: Double, burst: Int) async throws -> [BenchRow] {
        let receiver = WebhookReceiver()
        let bench = self
        return try await receiver.serve { url in
            let directory = Self.temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let secretFile = directory + ".secret"
            defer { try? FileManager.default.removeItem(atPath: secretFile) }
            try WebhookReceiver.writeSecret(to: secretFile)
            var configured = bench
            configured.brokerArguments += [
                "--data-dir", directory, "--webhook-url", url, "--webhook-secret-file", secretFile,
                "--update-hwm", "1000000",
            ]
            let broker = try configured.broker([])
            defer { broker.stop() }
            let pipeline = try RequestPipeline(endpoint: broker.command, credentials: bench.curve?.credentials)
            let sessions = try bench.openSessions(pipeline, users: (0..<100).map { "wh\($0)" })
            try await Self.waitForEvents(receiver, atLeast: 100, seconds: 10)
            var rows: [BenchRow] = []
            for rate in rates {
                receiver.reset()
                let total = Int(Double(rate) * seconds)
                bench.log("webhooks: \(rate)/s for \(seconds) s")
                let start = ContinuousClock.now
                for index in 0..<total {
                    pace(until: start + .nanoseconds(Int64(Double(index) * 1e9 / Double(rate))))
                    try pipeline.send(Self.timedChange(sessions[index % sessions.count]))
                }
                try pipeline.drain()
                try await Self.waitForEvents(receiver, atLeast: total, seconds: 60)
                let seen = receiver.snapshot
                var figures = seen.histogram.figures()
                figures["events"] = Double(seen.events)
                figures["events_per_post"] = Double(seen.events) / Double(max(1, seen.posts))
                rows.append(
                    BenchRow(
                        id: "W1.webhook-latency-\(rate)",
                        scenario: "status change → webhook POST received, \(rate) changes/s, default batching",
                        figures: figures,
                        summary:
                            "p50 \(f(figures["p50_ms"] ?? 0, 2)) ms, p99 \(f(figures["p99_ms"] ?? 0, 2)) ms, "
                            + "\(f(figures["events_per_post"] ?? 0, 1)) events per POST"))
            }
            receiver.reset()
            bench.log("webhooks: a burst of \(burst) changes")
            let started = monotonicNanoseconds()
            for index in 0..<burst { try pipeline.send(Self.timedChange(sessions[index % sessions.count])) }
            try pipeline.drain()
            let sent = monotonicNanoseconds()
            try await Self.waitForEvents(receiver, atLeast: burst, seconds: 120)
            let seen = receiver.snapshot
            let wall = Double(seen.lastArrival - started) / 1e9
            let perSecond = Double(seen.events) / wall
            rows.append(
                BenchRow(
                    id: "W2.webhook-throughput",
                    scenario: "\(burst) status changes sent as fast as the broker takes them, delivered to one URL",
                    figures: [
                        "per_second": perSecond, "events_per_post": Double(seen.events) / Double(max(1, seen.posts)),
                        "sent_per_second": Double(burst) / (Double(sent - started) / 1e9),
                    ],
                    summary:
                        "**\(n(perSecond)) events/s** delivered (accepted by the broker at "
                        + "\(n(Double(burst) / (Double(sent - started) / 1e9)))/s), "
                        + "\(f(Double(seen.events) / Double(max(1, seen.posts)), 1)) events per POST"))
            return rows
        }
    }

    private static func waitForEvents(_ receiver: WebhookReceiver, atLeast count: Int, seconds: Double) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
        while receiver.events < count {
            guard ContinuousClock.now < deadline else {
                throw BenchError("the receiver got \(receiver.events) of \(count) webhook events in \(seconds) s")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}
