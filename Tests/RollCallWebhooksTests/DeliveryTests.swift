import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing

@testable import RollCallWebhooks

/// Webhook delivery over real HTTP into a receiver started in the test, which verifies every signature.
@Suite struct DeliveryTests {
    static let secret = "whsec_" + Data((0..<32).map { UInt8($0 * 11 % 256) }).base64EncodedString()

    /// Runs a delivery service for `urls` over `log` until `body` returns, then stops it gracefully and waits for
    /// it, whatever happens.
    static func withDelivery<T>(
        urls: [String], log: ArrayLog, cursors: any WebhookCursorStore, batchMax: Int = 100,
        timeoutMilliseconds: Int64 = 2_000,
        _ body: (WebhookDelivery) async throws -> T
    ) async throws -> T {
        var settings = WebhookSettings()
        settings.urls = urls
        settings.batchMax = batchMax
        settings.batchMilliseconds = 20
        settings.timeoutMilliseconds = timeoutMilliseconds
        try settings.validate()
        var logger = Logger(label: "webhooks")
        logger.logLevel = .debug
        let delivery = WebhookDelivery(
            configuration: WebhookConfiguration(settings: settings, signer: try StandardWebhookSigner(secret: secret)),
            source: log, cursors: cursors, logger: logger)
        let group = ServiceGroup(configuration: .init(services: [delivery], logger: logger))
        let running = Task { try await group.run() }
        do {
            let result = try await body(delivery)
            await group.triggerGracefulShutdown()
            try await running.value
            return result
        } catch {
            await group.triggerGracefulShutdown()
            _ = await running.result
            throw error
        }
    }

    /// A batch answered 500 is sent again, with the same webhook-id and body, after the first backoff (0.5 to 1 s);
    /// nothing later is sent before it is acknowledged; then the next batch goes with its own id.
    @Test func retriesA500WithTheSameID() async throws {
        let receiver = Receiver(secret: Self.secret, answers: [500])
        let log = ArrayLog(1...3)
        let cursors = MemoryCursorStore()
        try await receiver.serve { url in
            cursors.save(WebhookCursor(acknowledged: 0), for: url)
            try await Self.withDelivery(urls: [url], log: log, cursors: cursors) { delivery in
                try await waitUntil("the first attempt", within: .seconds(10)) { !receiver.deliveries.isEmpty }
                // Entries that come while the batch waits for its retry go in the next batch, after it.
                log.append(4...5)
                delivery.notify()
                try await waitUntil("the retry and the next batch", within: .seconds(10)) {
                    receiver.deliveries.count >= 3
                }
                try await waitUntil("the cursor saved", within: .seconds(10)) {
                    cursors.cursor(for: url)?.acknowledged == 5
                }
            }
        }
        let deliveries = receiver.deliveries
        #expect(deliveries.map(\.id) == ["msg_1_3", "msg_1_3", "msg_4_5"])
        #expect(deliveries.map(\.status) == [500, 200, 200])
        #expect(deliveries.map(\.offsets) == [[1, 2, 3], [1, 2, 3], [4, 5]])
        #expect(deliveries.allSatisfy { $0.signatureValid })
        let backoff = deliveries[0].received.duration(to: deliveries[1].received)
        print("retry after \(backoff)")
        #expect(backoff >= .milliseconds(500))
    }

    /// Retention trimmed entries a URL had not received (its cursor is below what was trimmed): the gap is reported
    /// once (counted, on the URL's state with the offsets), and what is left is delivered in order.
    @Test func aGapTrimmedBeforeDeliveryIsReported() async throws {
        let receiver = Receiver(secret: Self.secret, answers: [])
        let log = ArrayLog(50...52)
        log.trimmed.store(49, ordering: .relaxed)
        let cursors = MemoryCursorStore()
        try await receiver.serve { url in
            cursors.save(WebhookCursor(acknowledged: 10), for: url)
            try await Self.withDelivery(urls: [url], log: log, cursors: cursors) { delivery in
                try await waitUntil("the rest delivered", within: .seconds(10)) {
                    cursors.cursor(for: url)?.acknowledged == 52
                }
                try await waitUntil("the gap reported", within: .seconds(10)) {
                    delivery.states.first?.trimmedGaps == 1
                }
                let state = try #require(delivery.states.first)
                #expect(state.lastError == "entries after offset 10 through 49 trimmed before delivery")
                // Delivered since: nothing more to report however often the count comes round.
                log.append(53...54)
                delivery.notify()
                try await waitUntil("the next entries", within: .seconds(10)) {
                    cursors.cursor(for: url)?.acknowledged == 54
                }
                #expect(delivery.states.first?.trimmedGaps == 1)
            }
        }
        #expect(receiver.deliveries.flatMap(\.offsets) == [50, 51, 52, 53, 54])
    }

    /// A receiver that is down (connections refused) for a while gets everything once it is up, in offset order,
    /// each entry acknowledged once, in batches of at most the maximum.
    @Test func receiverDownForAWhile() async throws {
        let port = try await Receiver.freePort()
        let url = "http://127.0.0.1:\(port)/hook"
        let log = ArrayLog(1...7)
        let cursors = MemoryCursorStore()
        cursors.save(WebhookCursor(acknowledged: 0), for: url)
        let receiver = Receiver(secret: Self.secret)
        try await Self.withDelivery(urls: [url], log: log, cursors: cursors, batchMax: 3) { delivery in
            try await waitUntil("two refused attempts", within: .seconds(10)) {
                (delivery.states.first?.failures ?? 0) >= 2
            }
            #expect(delivery.states.first?.acknowledged == 0)
            log.append(8...10)
            delivery.notify()
            let started = ContinuousClock.now
            try await receiver.serve(port: port) { _ in
                try await waitUntil("everything delivered", within: .seconds(20)) {
                    receiver.acknowledgedOffsets.count >= 10
                }
            }
            print("delivered \(started.duration(to: .now)) after the receiver came up")
        }
        #expect(receiver.acknowledgedOffsets == Array(1...10))
        #expect(receiver.deliveries.first?.id == "msg_1_3", "the first batch is the one refused, with its id")
        #expect(receiver.deliveries.allSatisfy { $0.offsets.count <= 3 && $0.signatureValid })
        #expect(cursors.cursor(for: url)?.acknowledged == 10)
    }

    /// A URL without a cursor starts after the log's newest entry; what comes after is delivered in offset order
    /// across many batches, each id naming its batch's first and last offsets.
    @Test func newURLStartsAtTheNewestEntryAndKeepsOrder() async throws {
        let receiver = Receiver(secret: Self.secret)
        let log = ArrayLog(1...5)
        let cursors = MemoryCursorStore()
        try await receiver.serve { url in
            try await Self.withDelivery(urls: [url], log: log, cursors: cursors, batchMax: 4) { delivery in
                try await waitUntil("the starting cursor", within: .seconds(10)) { cursors.cursor(for: url) != nil }
                #expect(cursors.cursor(for: url) == WebhookCursor(acknowledged: 5))
                for chunk in stride(from: UInt64(6), through: 45, by: 5) {
                    log.append(chunk..<chunk + 5)
                    delivery.notify()
                    try await Task.sleep(for: .milliseconds(Int.random(in: 0...30)))
                }
                try await waitUntil("everything delivered", within: .seconds(20)) {
                    receiver.acknowledgedOffsets.count >= 40
                }
            }
        }
        #expect(receiver.acknowledgedOffsets == Array(6...45))
        for delivery in receiver.deliveries {
            #expect(delivery.id == "msg_\(delivery.offsets.first!)_\(delivery.offsets.last!)")
            #expect(delivery.offsets.count <= 4)
            #expect(delivery.signatureValid)
        }
    }

    /// While a backlog lasts, a batch's acknowledgement goes with the next batch's bounds: one save a batch (an etcd
    /// write on a cluster), not two; the last acknowledgement is saved alone once there is nothing more to send.
    @Test func aBacklogSavesOnceABatch() async throws {
        let receiver = Receiver(secret: Self.secret)
        let log = ArrayLog(1...30)
        let cursors = RecordingCursors()
        try await receiver.serve { url in
            cursors.store.save(WebhookCursor(acknowledged: 0), for: url)
            try await Self.withDelivery(urls: [url], log: log, cursors: cursors, batchMax: 10) { _ in
                try await waitUntil("30 acknowledged and saved", within: .seconds(10)) {
                    cursors.store.cursor(for: url) == WebhookCursor(acknowledged: 30)
                }
            }
        }
        #expect(receiver.acknowledgedOffsets == Array(1...30))
        let saved = cursors.saved.withLock { $0 }
        #expect(saved.map(\.acknowledged) == [0, 10, 20, 30], "each batch's bounds carry the last acknowledgement")
        #expect(saved.map(\.unacknowledgedThrough) == [10, 20, 30, nil])
    }

    /// A URL taken anew while a batch was in flight: the batch's acknowledgement, not saved yet, is not saved under
    /// the new term, where another holder may have moved the cursor past it meanwhile.
    @Test func anAcknowledgementIsNotSavedUnderATermTakenSince() async throws {
        let receiver = Receiver(secret: Self.secret, delay: .milliseconds(1_500))  // the ask is due when it answers
        try await Self.withHeldURL(receiver, log: ArrayLog(1...3)) { url, cursors, delivery in
            try await waitUntil("the first POST", within: .seconds(10)) { !receiver.deliveries.isEmpty }
            cursors.term.store(2, ordering: .relaxed)
            cursors.set(WebhookCursor(acknowledged: 10), for: url)  // the other holder went through 10
            try await waitUntil("started again from the other holder's cursor", within: .seconds(10)) {
                receiver.acknowledgedOffsets == [1, 2, 3] && delivery.states.first?.acknowledged == 10
            }
            #expect(cursors.cursor(for: url) == WebhookCursor(acknowledged: 10))
        }
    }

    /// `body` with a delivery to `receiver` of `log`, from cursor 0, which its store lets deliver (term 1).
    static func withHeldURL(
        _ receiver: Receiver, log: ArrayLog, _ body: (String, GatedCursors, WebhookDelivery) async throws -> Void
    ) async throws {
        let cursors = GatedCursors()
        cursors.allowed.store(true, ordering: .relaxed)
        try await receiver.serve { url in
            cursors.set(WebhookCursor(acknowledged: 0), for: url)
            try await Self.withDelivery(urls: [url], log: log, cursors: cursors) { try await body(url, cursors, $0) }
        }
    }

    /// A broker that may not deliver a URL (another node of a cluster holds it) sends nothing, asking again once a
    /// second; once it may, it starts from the cursor the store holds then (the last holder's); and once it may no
    /// longer, it notices within a second, idle as it is, and says who delivers.
    @Test func deliversOnlyWhileTheStoreLetsIt() async throws {
        let receiver = Receiver(secret: Self.secret)
        let log = ArrayLog(1...5)
        let cursors = GatedCursors()
        try await receiver.serve { url in
            cursors.set(WebhookCursor(acknowledged: 0), for: url)
            try await Self.withDelivery(urls: [url], log: log, cursors: cursors) { delivery in
                // Asked once at the start and once by the URL's task, which then marks the URL not delivering and
                // pauses before it asks a third time: the third ask comes after the mark.
                try await waitUntil("asked three times", within: .seconds(10)) {
                    cursors.asked.load(ordering: .relaxed) >= 3
                }
                #expect(receiver.deliveries.isEmpty)
                #expect(delivery.states.first?.delivering == false)
                #expect(delivery.states.first?.holder == "another node", "the status page says who delivers")
                cursors.set(WebhookCursor(acknowledged: 3), for: url)  // the last holder got through 3
                cursors.allowed.store(true, ordering: .relaxed)
                try await waitUntil("4 and 5 delivered", within: .seconds(10)) {
                    receiver.acknowledgedOffsets == [4, 5]
                }
                #expect(delivery.states.first?.holder == "this node")
                // Taken over while idle: the once-a-second ask notices, with nothing to send.
                cursors.allowed.store(false, ordering: .relaxed)
                try await waitUntil("the delivery given up", within: .seconds(10)) {
                    delivery.states.first?.delivering == false
                }
                #expect(delivery.states.first?.holder == "another node")
                let asked = cursors.asked.load(ordering: .relaxed)
                log.append(6...7)
                delivery.notify()
                try await waitUntil("asked again since", within: .seconds(10)) {
                    cursors.asked.load(ordering: .relaxed) > asked
                }
            }
        }
        #expect(receiver.acknowledgedOffsets == [4, 5])
        #expect(receiver.deliveries.allSatisfy { $0.signatureValid })
    }

    /// A broker that took a URL anew (a new term: it lost it, and another holder went on meanwhile) starts from the
    /// cursor the store holds then, not from where it was; a batch whose bounds the store refuses as fenced is not
    /// sent.
    @Test func aNewTermStartsFromTheStoresCursorAndAFencedBatchIsNotSent() async throws {
        let receiver = Receiver(secret: Self.secret)
        let log = ArrayLog(1...3)
        try await Self.withHeldURL(receiver, log: log) { url, cursors, delivery in
            try await waitUntil("1 to 3 delivered", within: .seconds(10)) {
                receiver.acknowledgedOffsets.count == 3
            }
            // Its own save of 3 first: the other holder's cursor must come after it.
            try await waitUntil("3 saved", within: .seconds(10)) { cursors.cursor(for: url)?.acknowledged == 3 }
            cursors.term.store(2, ordering: .relaxed)
            cursors.set(WebhookCursor(acknowledged: 10), for: url)  // the other holder went through 10
            log.append(4...12)
            delivery.notify()
            try await waitUntil("11 and 12 delivered", within: .seconds(10)) {
                receiver.acknowledgedOffsets.last == 12
            }
            cursors.fenced.store(true, ordering: .relaxed)
            log.append(13...13)
            delivery.notify()
            try await waitUntil("a fenced save", within: .seconds(10)) {
                cursors.fencedSaves.load(ordering: .relaxed) >= 1
            }
        }
        #expect(receiver.acknowledgedOffsets == [1, 2, 3, 11, 12])
        #expect(receiver.deliveries.count == 2)
    }

    /// A graceful stop sends nothing new but lets the POST in flight finish: acknowledged, its cursor is saved.
    @Test func gracefulStopFinishesTheRequestInFlight() async throws {
        let receiver = Receiver(secret: Self.secret, delay: .milliseconds(400))
        let log = ArrayLog(1...3)
        let cursors = MemoryCursorStore()
        try await receiver.serve { url in
            cursors.save(WebhookCursor(acknowledged: 0), for: url)
            let stopped = try await Self.withDelivery(urls: [url], log: log, cursors: cursors) { _ in
                try await waitUntil("the first POST", within: .seconds(10)) { !receiver.deliveries.isEmpty }
                log.append(4...6)
                return ContinuousClock.now
            }
            print("stopped \(stopped.duration(to: .now)) after the shutdown began")
            #expect(cursors.cursor(for: url) == WebhookCursor(acknowledged: 3))
            #expect(receiver.deliveries.count == 1, "nothing new after the shutdown began")
        }
    }
}

/// Cursors in memory that let the delivery deliver only while ``allowed`` is set, in ``term``, counting the times it
/// asked; while ``fenced`` is set, every save is refused as fenced (and counted).
final class GatedCursors: WebhookCursorStore {
    let allowed = Atomic<Bool>(false)
    let term = Atomic<UInt64>(1)
    /// The term last granted to the delivery.
    private let granted = Atomic<UInt64>(0)
    let asked = Atomic<Int>(0)
    let fenced = Atomic<Bool>(false)
    let fencedSaves = Atomic<Int>(0)
    private let store = MemoryCursorStore()

    func cursor(for url: String) -> WebhookCursor? { store.cursor(for: url) }

    func save(_ cursor: WebhookCursor, for url: String) throws {
        // Fenced as a cluster's store is: refused while the test says so, while another holder has the URL, or once
        // the term changed since it was granted (the URL taken anew: another holder may have moved the cursor).
        if fenced.load(ordering: .relaxed) || !allowed.load(ordering: .relaxed)
            || granted.load(ordering: .relaxed) != term.load(ordering: .relaxed)
        {
            fencedSaves.add(1, ordering: .relaxed)
            throw WebhookDeliveryFenced("fenced in the test")
        }
        store.save(cursor, for: url)
    }

    /// Sets the cursor as another holder would (no fence).
    func set(_ cursor: WebhookCursor, for url: String) { store.save(cursor, for: url) }

    func deliveryRight(for url: String) -> DeliveryRight {
        asked.add(1, ordering: .relaxed)
        guard allowed.load(ordering: .relaxed) else { return DeliveryRight(term: nil, holder: "another node") }
        let term = term.load(ordering: .relaxed)
        granted.store(term, ordering: .relaxed)
        return DeliveryRight(term: term, holder: "this node")
    }
}

/// A single broker's cursors, with every save recorded in order.
final class RecordingCursors: WebhookCursorStore {
    let store = MemoryCursorStore()
    let saved = Mutex<[WebhookCursor]>([])

    func cursor(for url: String) -> WebhookCursor? { store.cursor(for: url) }

    func save(_ cursor: WebhookCursor, for url: String) {
        saved.withLock { $0.append(cursor) }
        store.save(cursor, for: url)
    }
}
