import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// A webhook receiver over real HTTP on 127.0.0.1, in the test: it verifies each delivery's signature with the
/// secret, records it, and answers as scripted (the statuses in ``answers`` first, then 200).
final class Receiver: Sendable {
    struct Delivery: Equatable, Sendable {
        var id: String
        var type: String
        /// The events' offsets (`presence.changed`), or the offline transition's (`presence.offline_for`).
        var offsets: [UInt64]
        var signatureValid: Bool
        var status: Int
        var received: ContinuousClock.Instant
    }

    private struct State {
        var answers: [Int] = []
        var deliveries: [Delivery] = []
    }

    let secret: String
    /// How long each answer is held back.
    let delay: Duration
    private let state = Mutex(State())

    init(secret: String, answers: [Int] = [], delay: Duration = .zero) {
        self.secret = secret
        self.delay = delay
        state.withLock { $0.answers = answers }
    }

    var deliveries: [Delivery] { state.withLock { $0.deliveries } }

    /// The offsets of the acknowledged deliveries, in the order they came.
    var acknowledgedOffsets: [UInt64] {
        deliveries.filter { $0.status == 200 && $0.type == "presence.changed" }.flatMap(\.offsets)
    }

    private func handle(_ request: Request) async throws -> Response {
        let body = try await request.body.collect(upTo: 1 << 22)
        let bytes = Array(body.readableBytesView)
        var headers: [String: String] = [:]
        for field in request.headers where field.name.canonicalName.hasPrefix("webhook-") {
            headers[field.name.canonicalName] = field.value
        }
        let valid = SignerTests.verify(secret: secret, headers: headers, body: bytes)
        let json = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
        let events = (json?["data"] as? [String: Any])?["events"] as? [[String: Any]] ?? []
        let data = json?["data"] as? [String: Any]
        let offsets =
            events.compactMap { ($0["offset"] as? NSNumber)?.uint64Value }
            + [(data?["offset"] as? NSNumber)?.uint64Value].compactMap { $0 }
        let type = json?["type"] as? String ?? ""
        let status = state.withLock { state -> Int in
            let status = state.answers.isEmpty ? 200 : state.answers.removeFirst()
            state.deliveries.append(
                Delivery(
                    id: headers["webhook-id"] ?? "", type: type, offsets: offsets, signatureValid: valid,
                    status: status,
                    received: .now))
            return status
        }
        if delay > .zero { try await Task.sleep(for: delay) }
        return Response(status: .init(code: status))
    }

    /// Runs `body` with the receiver listening on `port` of 127.0.0.1 (0: a free one), handing it
    /// `http://127.0.0.1:PORT/hook`; stopped after, whatever happens.
    func serve<T>(port: Int = 0, _ body: (String) async throws -> T) async throws -> T {
        let router = Router()
        router.post("hook") { request, _ in try await self.handle(request) }
        let bound = Mutex<Int?>(nil)
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)),
            onServerRunning: { channel in bound.withLock { $0 = channel.localAddress?.port } },
            logger: Logger(label: "receiver"))
        let group = ServiceGroup(configuration: .init(services: [app], logger: Logger(label: "receiver")))
        let server = Task { try await group.run() }
        do {
            let port = try await waitFor("the receiver to listen", within: .seconds(10)) { bound.withLock { $0 } }
            let result = try await body("http://127.0.0.1:\(port)/hook")
            await group.triggerGracefulShutdown()
            _ = await server.result
            return result
        } catch {
            await group.triggerGracefulShutdown()
            _ = await server.result
            throw error
        }
    }

    /// A port that was free a moment ago: the receiver listens on it, then stops.
    static func freePort() async throws -> Int {
        try await Receiver(secret: "").serve { url in
            Int(url.split(separator: ":").last!.split(separator: "/").first!)!
        }
    }
}

struct TimedOut: Error, CustomStringConvertible {
    var description: String
}

/// Polls `value` every 10 ms until it is not `nil`, for at most `limit`; throws when the deadline passes.
func waitFor<T>(
    _ what: String, within limit: Duration, _ value: () throws -> T?
) async throws -> T {
    let deadline = ContinuousClock.now + limit
    while true {
        if let value = try value() { return value }
        guard ContinuousClock.now < deadline else { throw TimedOut(description: "no \(what) within \(limit)") }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// Polls `condition` every 10 ms until it holds, for at most `limit`; throws when the deadline passes.
func waitUntil(_ what: String, within limit: Duration, _ condition: () throws -> Bool) async throws {
    _ = try await waitFor(what, within: limit) { try condition() ? true : nil }
}
