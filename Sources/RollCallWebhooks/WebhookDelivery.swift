import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import RollCallCore
import ServiceLifecycle
import Synchronization

/// Webhook delivery as a `Service` (docs/webhooks.md): for each URL, a task that runs its ``DeliveryMachine``,
/// reads the log from the ``WebhookEventSource``, POSTs signed batches with async-http-client and saves the cursor
/// in the ``WebhookCursorStore``. It runs on Swift Concurrency's and NIO's threads, never on the broker's event
/// loop: the broker only calls ``notify()`` after each log commit, which takes a lock and returns.
///
/// With `--webhook-offline-after-ms`, each URL has a second stream, `presence.offline_for`, with a cursor of its own
/// (``OfflineForSource``): the two streams are each in offset order, not ordered with each other.
///
/// A graceful shutdown sends no new batch: a POST under way ends with its answer or its timeout, and its cursor is
/// saved only if it was acknowledged. A cancellation abandons it at once (nothing saved).
public final class WebhookDelivery: Service, Sendable {
    public let configuration: WebhookConfiguration
    private let source: any WebhookEventSource
    private let cursors: any WebhookCursorStore
    private let logger: Logger
    private let unixSeconds: @Sendable () -> Int64
    private let jitter: @Sendable () -> Double
    private let offlineSource: OfflineForSource?
    private let urls: [URLDelivery]
    private let stopping = Atomic<Bool>(false)
    /// Where the cursor store's calls run: they block (SQLite, or etcd on a cluster, seconds while it is away), and
    /// Swift Concurrency's two shared threads must not wait for them.
    private let storeQueue = DispatchQueue(label: "rollcall-webhook-cursors")
    /// Where the log's reads run, for the same reason: a slow disk holds this queue, not one of those two threads.
    private let logQueue = DispatchQueue(label: "rollcall-webhook-log")

    /// `unixSeconds` gives `webhook-timestamp` (the wall clock: receivers compare it with theirs, so it is not the
    /// broker's clock, which test mode moves); `jitter` gives each retry's jitter in 0...1. `brokerNow` is the
    /// broker's clock, which decides `presence.offline_for`; `offlineSettle` (ms) is how long a transition may take to
    /// reach the log (the broker's longest commit delay).
    public init(
        configuration: WebhookConfiguration, source: any WebhookEventSource, cursors: any WebhookCursorStore,
        logger: Logger,
        brokerNow: @escaping @Sendable () -> BrokerTime = {
            BrokerTime(milliseconds: Int64(Date().timeIntervalSince1970 * 1000))
        },
        offlineSettle: Int64 = 1_000,
        unixSeconds: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) },
        jitter: @escaping @Sendable () -> Double = { Double.random(in: 0...1) }
    ) {
        self.configuration = configuration
        self.source = source
        self.cursors = cursors
        self.logger = logger
        self.unixSeconds = unixSeconds
        self.jitter = jitter
        let offlineAfter = configuration.settings.offlineAfterMilliseconds
        offlineSource = offlineAfter.map {
            OfflineForSource(log: source, offlineAfter: $0, settle: offlineSettle, now: brokerNow)
        }
        urls = configuration.settings.urls.flatMap { url in
            [URLDelivery(url: url, stream: .changes)]
                + (offlineAfter.map { [URLDelivery(url: url, stream: .offlineFor(milliseconds: $0))] } ?? [])
        }
        // A URL configured for the first time starts at the newest entry as of now, before the broker runs, so that
        // every transition after the start is delivered; a store that fails now is tried again by the URL's task. A
        // node of a cluster, which has not joined yet, claims it when it first takes the URL.
        for url in urls where cursors.deliveryRight(for: url.cursorKey).term != nil { _ = try? claimCursor(url) }
    }

    /// New entries were committed to the log: every URL reads it now instead of at its next poll. Safe and cheap
    /// from any thread (the broker's loop calls it).
    public func notify() {
        for url in urls { url.wake.signal() }
    }

    /// Each URL's state as last seen, in the order of the settings (with its `presence.offline_for` stream after it).
    public var states: [URLState] { urls.map { $0.state.withLock { $0 } } }

    /// Delivers until a graceful shutdown (or cancellation), then shuts its HTTP client down.
    public func run() async throws {
        var http = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(
                connect: .milliseconds(configuration.settings.timeoutMilliseconds),
                read: .milliseconds(configuration.settings.timeoutMilliseconds)))
        // A refused connection is a failed attempt, retried by the machine's backoff, not by the client's own.
        http.connectionPool.retryConnectionEstablishment = false
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: http)
        logger.info(
            "webhook delivery started",
            metadata: [
                "urls": "\(configuration.settings.urls.count)", "batch_max": "\(configuration.settings.batchMax)",
            ])
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { tasks in
                for url in urls {
                    tasks.addTask { await self.deliver(url, client: client) }
                }
            }
        } onGracefulShutdown: {
            self.stopping.store(true, ordering: .releasing)
            self.notify()
        }
        try? await client.shutdown()
        logger.info("webhook delivery stopped")
    }

    private var isStopping: Bool { stopping.load(ordering: .acquiring) || Task.isCancelled }

    /// One URL's delivery: while the cursor store lets this broker deliver it (always, but on a cluster), from the
    /// saved cursor; else a wait, once a second, whatever wakes the URL meanwhile.
    private func deliver(_ url: URLDelivery, client: HTTPClient) async {
        var first = true
        while !isStopping {
            // Not again at once after the URL was lost: a store that keeps refusing must not make a busy loop.
            if !first { await pause(url) }
            first = false
            var right = await deliveryRight(url)
            while !isStopping, right.term == nil {
                url.update {
                    $0.delivering = false
                    $0.holder = right.holder
                    $0.pending = 0  // another node's to count
                }
                url.metrics.pending.record(0)
                await pause(url)
                right = await deliveryRight(url)
            }
            guard let term = right.term, !isStopping else { return }
            url.update {
                $0.delivering = true
                $0.holder = right.holder
            }
            await deliverWhileAllowed(url, term: term, client: client)
        }
    }

    /// A second, whatever wakes the URL meanwhile (but the stop).
    private func pause(_ url: URLDelivery) async {
        let until = ContinuousClock.now + .seconds(1)
        while !isStopping, ContinuousClock.now < until { await url.wake.wait(until: until) }
    }

    /// ``WebhookCursorStore/deliveryRight(for:)``, on the store's queue.
    private func deliveryRight(_ url: URLDelivery) async -> DeliveryRight {
        await offStore { [cursors] in cursors.deliveryRight(for: url.cursorKey) }
    }

    /// Runs a blocking call of the cursor store on its own queue.
    private func offStore<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await Self.run(on: storeQueue, body)
    }

    /// Runs a blocking read of the log on its own queue.
    private func offLog<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await Self.run(on: logQueue, body)
    }

    private static func run<T: Sendable>(on queue: DispatchQueue, _ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in queue.async { continuation.resume(returning: body()) } }
    }

    /// One URL's loop, the machine's shell, from the saved cursor until the cursor store stops letting this broker
    /// deliver the URL (another node of a cluster took it over), or the stop.
    private func deliverWhileAllowed(_ url: URLDelivery, term: UInt64, client: HTTPClient) async {
        var logger = self.logger
        logger[metadataKey: "webhook_url"] = "\(url.url)"
        var policy = configuration.settings.policy
        let source: any WebhookEventSource
        switch url.stream {
        case .changes:
            source = self.source
        case .offlineFor:
            logger[metadataKey: "webhook_type"] = "presence.offline_for"
            source = offlineSource ?? self.source
            policy.batchMax = 1
            policy.idPrefix = "msg_offline"
        }
        let poll = Duration.milliseconds(configuration.settings.batchMilliseconds)
        guard let cursor = await startingCursor(url, logger: logger) else { return }
        let retried = cursor.unacknowledgedSince.map { Duration.seconds(max(0, unixSeconds() - $0)) } ?? .zero
        var machine = DeliveryMachine<ContinuousClock.Instant>(policy: policy, cursor: cursor, retriedFor: retried)
        url.update { $0.acknowledged = cursor.acknowledged }
        var nextCount = ContinuousClock.now
        var readFailing = false
        /// The trimmed offset last reported: each gap is reported once.
        var reportedTrim: UInt64 = 0
        var nextTrimCheck = ContinuousClock.now
        /// When to ask the store again whether this broker still delivers the URL: a second after the last ask.
        var nextRightCheck = ContinuousClock.now + .seconds(1)
        /// An acknowledgement not saved yet. While a backlog lasts it goes with the next batch's bounds (one save a
        /// batch, not two: an etcd write on a cluster); it is saved alone before a wait or the stop. A crash in
        /// between, or the URL lost meanwhile, sends the acknowledged batch again under its id: a duplicate, never a
        /// loss.
        var unsaved: WebhookCursor?
        while !isStopping {
            // Once a second, busy or idle: the status page names the holder as the store says, and a URL taken over
            // meanwhile stops here (a batch's save is fenced too, but a retry saves nothing).
            if ContinuousClock.now >= nextRightCheck {
                nextRightCheck = .now + .seconds(1)
                let right = await deliveryRight(url)
                url.update { $0.holder = right.holder }
                guard right.term == term else {
                    // An acknowledgement not saved yet is dropped: under a term taken since, another holder may have
                    // moved the cursor past it (the batch may come again, under its id).
                    logger.notice("webhook: this node no longer delivers the URL as it did; starting from its cursor")
                    return
                }
            }
            // Before the read: entries trimmed after the last one read were never read (a trim after the read is
            // seen by the next check, past what was read by then).
            if url.stream == .changes, ContinuousClock.now >= nextTrimCheck {
                nextTrimCheck = .now + .seconds(1)
                let trimmed = await offLog { try? source.trimmedThrough() }
                if let trimmed, trimmed > max(machine.readThrough, reportedTrim) {
                    reportedTrim = trimmed
                    reportTrimmed(after: machine.readThrough, through: trimmed, url, logger: logger)
                }
            }
            if machine.room > 0 {
                let (after, limit) = (machine.readThrough, machine.room)
                do {
                    let entries = try await offLog { Result { try source.events(after: after, limit: limit) } }.get()
                    machine.received(entries, now: .now)
                    if readFailing { logger.notice("webhook: the log can be read again") }
                    readFailing = false
                } catch {
                    // Once per failure streak, not at every poll.
                    if !readFailing { logger.error("webhook: the log cannot be read", metadata: ["error": "\(error)"]) }
                    readFailing = true
                }
            }
            if url.stream == .changes, ContinuousClock.now >= nextCount {
                nextCount = .now + .seconds(1)
                let acknowledged = machine.acknowledged
                if let pending = await offLog({ try? source.count(after: acknowledged) }) {
                    url.metrics.pending.record(pending)
                    url.update { $0.pending = pending }
                }
            }
            let next = machine.next(now: .now)
            if let pending = unsaved {
                // The next batch's bounds carry the acknowledgement; anything else saves it now.
                var carried = false
                if case .send(_, let save?) = next { carried = save.acknowledged == pending.acknowledged }
                if !carried, await !self.save(pending, url, logger: logger) { return }
                unsaved = nil
            }
            switch next {
            case .wait(let until):
                let deadline = min(until ?? .now + poll, .now + poll)
                await url.wake.wait(until: deadline)
            case .send(let batch, var save):
                // A batch sent for the first time: its retry window starts now, on the wall clock, across restarts.
                if save?.unacknowledgedThrough != nil, save?.unacknowledgedSince == nil {
                    save?.unacknowledgedSince = unixSeconds()
                }
                if let save, await !self.save(save, url, logger: logger) { return }
                let result = await post(batch, to: url, client: client, logger: logger)
                url.metrics.count(result)
                if result == .ok {
                    let saved = machine.acknowledged(now: .now)
                    unsaved = saved
                    url.update {
                        $0.acknowledged = saved.acknowledged
                        $0.deliveredBatches += 1
                        $0.failures = 0
                    }
                    logger.debug(
                        "webhook batch acknowledged",
                        metadata: ["webhook_id": "\(batch.id)", "events": "\(batch.entries.count)"])
                    continue
                }
                switch machine.failed(now: .now, jitter: jitter()) {
                case .retry(let delay, let attempt):
                    url.update { $0.failures += 1 }
                    logger.warning(
                        "webhook batch failed; retrying",
                        metadata: [
                            "webhook_id": "\(batch.id)", "result": "\(result.rawValue)", "next_attempt": "\(attempt)",
                            "retry_in": "\(delay)",
                        ])
                case .skipped(let skipped, let cursor):
                    url.metrics.count(.skipped)
                    guard await self.save(cursor, url, logger: logger) else { return }
                    url.update {
                        $0.acknowledged = cursor.acknowledged
                        $0.skippedBatches += 1
                        $0.failures = 0
                    }
                    logger.error(
                        "webhook batch skipped: still failing after the retry window",
                        metadata: [
                            "webhook_id": "\(skipped.id)", "events": "\(skipped.entries.count)",
                            "attempts": "\(skipped.attempts)", "retry_hours": "\(configuration.settings.retryHours)",
                        ])
                }
            }
        }
        // Stopping: the last acknowledgement is kept.
        if let unsaved { _ = await save(unsaved, url, logger: logger) }
    }

    /// Retention trimmed entries after `after` that the URL had not been sent: they are gone (the log keeps each
    /// user's latest entry, the rest up to `through` may be missing). Logged at `error`, counted, and shown on the
    /// status page; delivery goes on with what is left.
    private func reportTrimmed(after: UInt64, through: UInt64, _ url: URLDelivery, logger: Logger) {
        url.metrics.trimmedGaps.increment()
        url.update {
            $0.trimmedGaps += 1
            $0.lastError = "entries after offset \(after) through \(through) trimmed before delivery"
        }
        logger.error(
            """
            webhook: retention trimmed entries this URL had not received; transitions after the offset may be lost \
            to it (keep --history-retention-ms longer than --webhook-retry-hours)
            """,
            metadata: ["after": "\(after)", "trimmed_through": "\(through)"])
    }

    /// The saved cursor, else the log's newest offset, saved at once (so that a restart does not skip what came in
    /// between).
    private func claimCursor(_ url: URLDelivery) throws -> WebhookCursor {
        if let cursor = try cursors.cursor(for: url.cursorKey) { return cursor }
        let cursor = WebhookCursor(acknowledged: try source.latestOffset())
        try cursors.save(cursor, for: url.cursorKey)
        logger.info(
            "webhook URL starts at the log's newest entry",
            metadata: ["webhook_url": "\(url.url)", "offset": "\(cursor.acknowledged)"])
        return cursor
    }

    /// ``claimCursor(_:)``, retried every second while the store or the log cannot be read; `nil` when stopping
    /// first.
    private func startingCursor(_ url: URLDelivery, logger: Logger) async -> WebhookCursor? {
        while !isStopping {
            let claimed = await offStore { [self] in Result { try claimCursor(url) } }
            do {
                return try claimed.get()
            } catch {
                logger.warning("webhook: no cursor yet; retrying in 1 s", metadata: ["error": "\(error)"])
                await url.wake.wait(until: .now + .seconds(1))
            }
        }
        return nil
    }

    /// Saves `cursor`; a failure is logged (the next save, or a restart from the older cursor, which sends some
    /// events again, makes up for it: at least once). `false` if the store refused it because this broker no longer
    /// delivers the URL (``WebhookDeliveryFenced``): the caller stops.
    private func save(_ cursor: WebhookCursor, _ url: URLDelivery, logger: Logger) async -> Bool {
        let saved = await offStore { [cursors] in Result { try cursors.save(cursor, for: url.cursorKey) } }
        switch saved {
        case .success: return true
        case .failure(let fenced as WebhookDeliveryFenced):
            logger.notice("webhook: this node no longer delivers the URL", metadata: ["reason": "\(fenced)"])
            return false
        case .failure(let error):
            logger.error("webhook: the cursor cannot be saved", metadata: ["error": "\(error)"])
            return true
        }
    }

    /// One signed POST of `batch`; how it ended.
    private func post(
        _ batch: DeliveryMachine<ContinuousClock.Instant>.Batch, to url: URLDelivery, client: HTTPClient,
        logger: Logger
    ) async -> WebhookMetrics.Result {
        let body: [UInt8]
        switch url.stream {
        case .changes: body = WebhookPayload.presenceChanged(batch.entries)
        case .offlineFor(let milliseconds):
            body = WebhookPayload.offlineFor(batch.entries[0], offlineMilliseconds: milliseconds)
        }
        var request = HTTPClientRequest(url: url.url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "rollcall-webhooks")
        for header in configuration.signer.headers(id: batch.id, timestamp: unixSeconds(), body: body) {
            request.headers.add(name: header.name, value: header.value)
        }
        request.body = .bytes(body)
        let started = ContinuousClock.now
        defer { url.metrics.recordLatency(since: started) }
        do {
            let response = try await client.execute(
                request, timeout: .milliseconds(configuration.settings.timeoutMilliseconds))
            // Read (and drop) the answer's body, so that the connection can be used again; a large one closes it.
            _ = try? await response.body.collect(upTo: 1 << 16)
            guard (200..<300).contains(response.status.code) else {
                url.update { $0.lastError = "HTTP \(response.status.code)" }
                return .httpError
            }
            return .ok
        } catch {
            url.update { $0.lastError = "\(error)" }
            if let error = error as? HTTPClientError,
                [.deadlineExceeded, .readTimeout, .connectTimeout].contains(error)
            {
                return .timeout
            }
            return .connectionError
        }
    }
}

extension WebhookDelivery {
    /// What a URL receives on one of its streams.
    public enum Stream: Equatable, Sendable {
        /// `presence.changed`: every transition, in batches.
        case changes
        /// `presence.offline_for`: one POST per user offline for this long.
        case offlineFor(milliseconds: Int64)
    }

    /// One URL's delivery as the status page and the tests see it.
    public struct URLState: Equatable, Sendable {
        public var url: String
        public var stream: Stream
        /// The offset of the last entry acknowledged (or skipped).
        public var acknowledged: UInt64 = 0
        /// Entries after it, as last counted.
        public var pending = 0
        public var deliveredBatches = 0
        public var skippedBatches = 0
        /// Times retention trimmed entries the URL had not received.
        public var trimmedGaps = 0
        /// Failed attempts of the current batch.
        public var failures = 0
        public var lastError: String?
        /// Whether this broker delivers the URL now (on a cluster, one node at a time does).
        public var delivering = true
        /// Which node delivers it, as the cursor store last said (on a cluster, `<node>/<lease>`); `nil` on a single
        /// broker, or while the store cannot say.
        public var holder: String?
    }

    /// What a URL's task shares: its wake-up, its metrics and its state.
    final class URLDelivery: Sendable {
        let url: String
        let stream: Stream
        /// Where its cursor is kept: the URL, or ``OfflineForSource/cursorKey(for:)``.
        let cursorKey: String
        let wake = WakeSignal()
        let metrics: WebhookMetrics
        let state: Mutex<URLState>

        init(url: String, stream: Stream) {
            self.url = url
            self.stream = stream
            cursorKey = stream == .changes ? url : OfflineForSource.cursorKey(for: url)
            metrics = WebhookMetrics(url: url, type: stream == .changes ? "presence.changed" : "presence.offline_for")
            state = Mutex(URLState(url: url, stream: stream))
        }

        func update(_ change: (inout URLState) -> Void) { state.withLock { change(&$0) } }
    }
}
