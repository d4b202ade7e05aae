import RollCallCore
import Testing

@testable import RollCallWebhooks

/// One URL's delivery decisions, without a socket, on instants the tests move.
@Suite struct DeliveryMachineTests {
    typealias Machine = DeliveryMachine<ContinuousClock.Instant>

    static let t0 = ContinuousClock.now
    static let policy = DeliveryPolicy(batchMax: 100, batchWindow: .milliseconds(50), retryWindow: .seconds(24 * 3600))

    static func at(_ milliseconds: Int64) -> ContinuousClock.Instant { t0 + .milliseconds(milliseconds) }

    /// The batch `action` sends, with the cursor it asks to save first, or `nil`.
    static func sent(_ action: Machine.Action) -> (batch: Machine.Batch, save: WebhookCursor?)? {
        guard case .send(let batch, let save) = action else { return nil }
        return (batch, save)
    }

    /// A backlog is cut into full batches at once, each only after the previous one is acknowledged; the rest goes
    /// when its window (from its arrival) is over.
    @Test func batchesByCount() throws {
        var machine = Machine(policy: Self.policy, cursor: WebhookCursor(acknowledged: 0))
        machine.received((1...250).map(entry), now: Self.at(0))
        #expect(machine.readThrough == 100, "the buffer holds one batch at most")
        let first = try #require(Self.sent(machine.next(now: Self.at(0))))
        #expect(first.batch.entries.map(\.offset) == Array(1...100))
        #expect(first.batch.id == "msg_1_100")
        #expect(first.save == WebhookCursor(acknowledged: 0, unacknowledgedThrough: 100))
        machine.received((101...250).map(entry), now: Self.at(1))
        #expect(machine.next(now: Self.at(1)) == .wait(until: nil), "one batch in flight at most")
        #expect(machine.acknowledged(now: Self.at(2)) == WebhookCursor(acknowledged: 100))
        let second = try #require(Self.sent(machine.next(now: Self.at(2))))
        #expect(second.batch.entries.map(\.offset) == Array(101...200))
        machine.received((201...250).map(entry), now: Self.at(3))
        _ = machine.acknowledged(now: Self.at(4))
        #expect(machine.next(now: Self.at(4)) == .wait(until: Self.at(53)), "50 entries wait for their window")
        let third = try #require(Self.sent(machine.next(now: Self.at(53))))
        #expect(third.batch.entries.map(\.offset) == Array(201...250))
    }

    /// What arrives within the window of the first entry goes together; what arrives after goes in the next batch.
    @Test func batchesByTime() throws {
        var machine = Machine(policy: Self.policy, cursor: WebhookCursor(acknowledged: 0))
        #expect(machine.next(now: Self.at(0)) == .wait(until: nil))
        machine.received([entry(1), entry(2)], now: Self.at(10))
        #expect(machine.next(now: Self.at(10)) == .wait(until: Self.at(60)))
        machine.received([entry(3)], now: Self.at(40))
        #expect(machine.next(now: Self.at(59)) == .wait(until: Self.at(60)))
        let batch = try #require(Self.sent(machine.next(now: Self.at(60)))).batch
        #expect(batch.entries.map(\.offset) == [1, 2, 3])
        machine.received([entry(4)], now: Self.at(61))
        #expect(machine.next(now: Self.at(200)) == .wait(until: nil), "the first batch is still in flight")
        _ = machine.acknowledged(now: Self.at(200))
        let next = try #require(Self.sent(machine.next(now: Self.at(200)))).batch
        #expect(next.entries.map(\.offset) == [4], "its window was over while the first batch was in flight")
    }

    /// Batches follow the log's order and never overlap, whatever the reads return twice.
    @Test func orderAcrossBatches() {
        var machine = Machine(
            policy: DeliveryPolicy(batchMax: 7, batchWindow: .milliseconds(5), retryWindow: .seconds(60)),
            cursor: WebhookCursor(acknowledged: 0))
        let log = Array(stride(from: UInt64(3), through: 300, by: 3))
        var delivered: [UInt64] = []
        var now: Int64 = 0
        var available = 0
        while delivered.count < log.count && now < 10_000 {
            now += 1
            available = min(log.count, available + 3)
            // Each read also returns the last three entries read before: the machine ignores them.
            let read = log.prefix(available).filter { $0 + 9 > machine.readThrough }.prefix(machine.room + 3)
            machine.received(read.map(entry), now: Self.at(now))
            if case .send(let batch, _) = machine.next(now: Self.at(now)) {
                delivered += batch.entries.map(\.offset)
                _ = machine.acknowledged(now: Self.at(now))
            }
        }
        #expect(delivered == Array(stride(from: UInt64(3), through: 300, by: 3)))
    }

    /// A failed batch is sent again whole, with the same id, after a delay that doubles from 1 s to at most
    /// 5 min, within the jitter's bounds (half the backoff to all of it); no other batch goes meanwhile.
    @Test func retriesTheSameBatchWithCappedJitteredBackoff() throws {
        var machine = Machine(policy: Self.policy, cursor: WebhookCursor(acknowledged: 0))
        machine.received([entry(1), entry(2)], now: Self.at(0))
        let first = try #require(Self.sent(machine.next(now: Self.at(50)))).batch
        var now: Int64 = 50
        var delays: [Duration] = []
        for attempt in 1...14 {
            let jitter = [0.0, 1.0, 0.5][attempt % 3]
            guard case .retry(let delay, let next) = machine.failed(now: Self.at(now), jitter: jitter) else {
                Issue.record("attempt \(attempt) was not retried")
                return
            }
            #expect(next == attempt + 1)
            let base = Duration.seconds(min(1 << (attempt - 1), 300))
            #expect(delay >= base / 2 && delay <= base, "attempt \(attempt): \(delay) against \(base)")
            #expect(delay == base * ((1 + jitter) / 2))
            delays.append(delay)
            machine.received([entry(UInt64(10 + attempt))], now: Self.at(now))
            let ms = Int64(delay / .milliseconds(1))
            #expect(machine.next(now: Self.at(now + ms - 1)) == .wait(until: Self.at(now + ms)))
            now += ms
            let again = try #require(Self.sent(machine.next(now: Self.at(now))))
            #expect(again.batch.id == first.id)
            #expect(again.batch.entries == first.entries)
            #expect(again.batch.attempts == attempt + 1)
            #expect(again.save == nil, "nothing is saved for a retry")
        }
        #expect(delays[12] == .seconds(300), "capped at 5 min (attempt 13, jitter 1)")
        #expect(delays.allSatisfy { $0 <= .seconds(300) })
        print("backoff delays: \(delays)")
    }

    /// A batch still failing at the end of the retry window is skipped: counted, the cursor saved past it, and the
    /// next batch goes.
    @Test func skipsABatchAfterTheRetryWindow() throws {
        let policy = DeliveryPolicy(batchMax: 2, batchWindow: .milliseconds(50), retryWindow: .seconds(3600))
        var machine = Machine(policy: policy, cursor: WebhookCursor(acknowledged: 0))
        machine.received([entry(1), entry(2), entry(3)], now: Self.at(0))
        let batch = try #require(Self.sent(machine.next(now: Self.at(0)))).batch
        var now: Int64 = 0
        while true {
            let failure = machine.failed(now: Self.at(now), jitter: 1)
            if case .skipped(let skipped, let save) = failure {
                #expect(skipped.id == batch.id)
                #expect(save == WebhookCursor(acknowledged: 2))
                #expect(now >= 3_600_000, "retried for at least the window")
                break
            }
            guard case .retry(let delay, _) = failure else { return }
            now += Int64(delay / .milliseconds(1))
            _ = try #require(Self.sent(machine.next(now: Self.at(now))))
        }
        #expect(machine.skippedBatches == 1)
        #expect(machine.acknowledged == 2)
        // The buffer held one batch: the shell reads the rest after it.
        machine.received([entry(3)], now: Self.at(now))
        let next = try #require(Self.sent(machine.next(now: Self.at(now + 50)))).batch
        #expect(next.entries.map(\.offset) == [3])
    }

    /// The cursor moves only on an acknowledgement (or a skip): a failure saves nothing, and a batch sent for the
    /// first time saves only its bounds beside the unchanged acknowledged offset.
    @Test func cursorSavedOnlyOnAcknowledgement() throws {
        var machine = Machine(policy: Self.policy, cursor: WebhookCursor(acknowledged: 5))
        machine.received([entry(5), entry(6), entry(7)], now: Self.at(0))
        let sent = try #require(Self.sent(machine.next(now: Self.at(50))))
        #expect(sent.batch.entries.map(\.offset) == [6, 7], "the acknowledged entry is not sent again")
        #expect(sent.save == WebhookCursor(acknowledged: 5, unacknowledgedThrough: 7))
        guard case .retry = machine.failed(now: Self.at(60), jitter: 0) else {
            Issue.record("not retried")
            return
        }
        #expect(machine.acknowledged == 5)
        _ = try #require(Self.sent(machine.next(now: Self.at(560))))
        #expect(machine.acknowledged(now: Self.at(570)) == WebhookCursor(acknowledged: 7))
        #expect(machine.acknowledged == 7)
    }

    /// After a restart with a batch in flight, the first batch has the same bounds, so the same id, even though
    /// more entries are there and its window has not passed.
    @Test func resumesTheBatchInFlightWithTheSameID() throws {
        var machine = Machine(policy: Self.policy, cursor: WebhookCursor(acknowledged: 10, unacknowledgedThrough: 30))
        machine.received([entry(20), entry(30), entry(40), entry(50)], now: Self.at(0))
        let resumed = try #require(Self.sent(machine.next(now: Self.at(0)))).batch
        #expect(resumed.id == "msg_20_30")
        _ = machine.acknowledged(now: Self.at(1))
        #expect(machine.next(now: Self.at(1)) == .wait(until: Self.at(50)))
    }

    /// A batch in flight at a restart keeps its retry window: retried for 59 minutes of a one-hour window before the
    /// stop, it is skipped at the first failure a minute after the restart, not retried for another hour. The
    /// cursor saved for it keeps the time of its first attempt.
    @Test func aResumedBatchKeepsItsRetryWindow() throws {
        let policy = DeliveryPolicy(batchMax: 100, batchWindow: .milliseconds(50), retryWindow: .seconds(3600))
        let cursor = WebhookCursor(acknowledged: 10, unacknowledgedThrough: 30, unacknowledgedSince: 1_000_000)
        var machine = Machine(policy: policy, cursor: cursor, retriedFor: .seconds(59 * 60))
        machine.received([entry(20), entry(30), entry(40)], now: Self.at(0))
        let resumed = try #require(Self.sent(machine.next(now: Self.at(0))))
        #expect(resumed.batch.id == "msg_20_30")
        #expect(resumed.save?.unacknowledgedSince == 1_000_000, "the first attempt's time, not the restart's")
        guard case .retry = machine.failed(now: Self.at(1_000), jitter: 0) else {
            Issue.record("skipped before the window was over")
            return
        }
        _ = try #require(Self.sent(machine.next(now: Self.at(60_000))))
        guard case .skipped(let skipped, let save) = machine.failed(now: Self.at(60_000), jitter: 0) else {
            Issue.record("not skipped at the end of the window")
            return
        }
        #expect(skipped.id == "msg_20_30")
        #expect(save == WebhookCursor(acknowledged: 30))
        // The next batch is new: its first attempt's time is the shell's to stamp.
        let next = try #require(Self.sent(machine.next(now: Self.at(60_050))))
        #expect(next.save == WebhookCursor(acknowledged: 30, unacknowledgedThrough: 40))
    }

    /// A cursor with no batch in flight (acknowledged through its bounds) resumes nothing, whatever time it keeps.
    @Test func anAcknowledgedBatchIsNotResumed() throws {
        let cursor = WebhookCursor(acknowledged: 30, unacknowledgedThrough: 30, unacknowledgedSince: 5)
        var machine = Machine(policy: Self.policy, cursor: cursor, retriedFor: .seconds(100 * 3600))
        machine.received([entry(40)], now: Self.at(0))
        #expect(machine.next(now: Self.at(0)) == .wait(until: Self.at(50)))
        let batch = try #require(Self.sent(machine.next(now: Self.at(50))))
        guard case .retry = machine.failed(now: Self.at(60), jitter: 0) else {
            Issue.record("a new batch was skipped at once")
            return
        }
        #expect(batch.batch.id == "msg_40_40")
    }
}
