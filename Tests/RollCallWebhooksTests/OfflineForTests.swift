import Foundation
import Logging
import RollCallCore
import ServiceLifecycle
import Synchronization
import Testing

@testable import RollCallWebhooks

/// `presence.offline_for`: one event for a user still offline N ms after going offline, none for one who came back.
@Suite struct OfflineForTests {
    static let alice = UserID(validating: "alice")!
    static let bob = UserID(validating: "bob")!
    static let carol = UserID(validating: "carol")!

    /// `user`'s transition to `status` at broker time `ms`, with offset `ms * 1000`.
    static func transition(_ user: UserID, _ status: Status, at ms: Int64) -> LogEntry {
        let time = BrokerTime(milliseconds: ms)
        return LogEntry(
            offset: UInt64(ms) * 1000, time: time,
            record: PresenceRecord(
                user: user, status: status, since: time, lastSeen: time, sessions: status == .offline ? 0 : 1,
                seq: UInt64(ms) * 1000, reason: status == .offline ? .closed : nil))
    }

    /// Offline at 1,000 and still offline at 61,000 (N = 60 s): sent once the broker's clock (plus the settle
    /// time) passes the deadline, not before; alice, back at 30,000, gets nothing.
    @Test func sentAfterNUnlessTheUserCameBack() {
        var decider = OfflineForDecider(offlineAfter: 60_000)
        decider.feed([
            Self.transition(Self.alice, .offline, at: 1_000), Self.transition(Self.bob, .offline, at: 2_000),
            Self.transition(Self.alice, .online, at: 30_000),
        ])
        #expect(decider.due(now: BrokerTime(milliseconds: 62_000), complete: true, settle: 100, limit: 10) == [])
        #expect(
            decider.due(now: BrokerTime(milliseconds: 62_100), complete: true, settle: 100, limit: 10) == [
                Self.transition(Self.bob, .offline, at: 2_000)
            ])
        #expect(
            decider.due(now: BrokerTime(milliseconds: 99_000), complete: false, settle: 100, limit: 10) == [],
            "a log not read to its end may still hold bob's return")
    }

    /// An entry at or after the deadline in the log decides every candidate before it, whatever the clock says;
    /// a return exactly at the deadline does not cancel; the order is the log's, stopping at the first undecided.
    @Test func decidedByTheLogsOwnOrder() {
        var decider = OfflineForDecider(offlineAfter: 1_000)
        decider.feed([
            Self.transition(Self.alice, .offline, at: 100), Self.transition(Self.bob, .offline, at: 500),
            Self.transition(Self.alice, .online, at: 1_100),
        ])
        let early = BrokerTime(milliseconds: 0)
        #expect(
            decider.due(now: early, complete: false, settle: 0, limit: 10) == [
                Self.transition(Self.alice, .offline, at: 100)
            ], "alice's return at exactly t + N does not cancel; bob is not decided yet")
        decider.feed([Self.transition(Self.bob, .online, at: 1_499)])
        #expect(decider.due(now: early, complete: false, settle: 0, limit: 10).count == 1, "bob came back in time")
    }

    /// Over HTTP, on a broker clock the test moves: a user offline for N gets one signed `presence.offline_for`,
    /// with id `msg_offline_<offset>_<offset>`, once the clock passes its deadline and not before; one who came back gets
    /// none; `presence.changed` goes on apart.
    @Test func deliveredOnTheBrokersClock() async throws {
        let receiver = Receiver(secret: DeliveryTests.secret)
        let clock = Mutex(BrokerTime(milliseconds: 4_000))
        let log = ArrayLog(entries: [
            Self.transition(Self.alice, .offline, at: 1_000), Self.transition(Self.bob, .offline, at: 1_500),
            Self.transition(Self.alice, .online, at: 4_000),
        ])
        let cursors = MemoryCursorStore()
        var settings = WebhookSettings()
        settings.batchMilliseconds = 10
        settings.offlineAfterMilliseconds = 5_000
        try await receiver.serve { url in
            settings.urls = [url]
            cursors.save(WebhookCursor(acknowledged: 0), for: url)
            cursors.save(WebhookCursor(acknowledged: 0), for: OfflineForSource.cursorKey(for: url))
            let delivery = WebhookDelivery(
                configuration: WebhookConfiguration(
                    settings: settings, signer: try StandardWebhookSigner(secret: DeliveryTests.secret)),
                source: log, cursors: cursors, logger: Logger(label: "webhooks"), brokerNow: { clock.withLock { $0 } },
                offlineSettle: 0)
            let group = ServiceGroup(configuration: .init(services: [delivery], logger: Logger(label: "webhooks")))
            let running = Task { try await group.run() }
            defer { running.cancel() }
            try await waitUntil("the transitions", within: .seconds(10)) { receiver.acknowledgedOffsets.count == 3 }
            #expect(receiver.deliveries.allSatisfy { $0.type == "presence.changed" }, "nothing before the deadline")
            clock.withLock { $0 = BrokerTime(milliseconds: 6_500) }
            delivery.notify()
            try await waitUntil("bob's offline_for", within: .seconds(10)) {
                receiver.deliveries.contains { $0.type == "presence.offline_for" }
            }
            log.append(entries: [Self.transition(Self.carol, .offline, at: 7_000)])
            clock.withLock { $0 = BrokerTime(milliseconds: 12_000) }
            delivery.notify()
            // The stream is in log order: once carol's event is in, alice's would have come before it.
            try await waitUntil("carol's offline_for", within: .seconds(10)) {
                receiver.deliveries.filter { $0.type == "presence.offline_for" }.count >= 2
            }
            await group.triggerGracefulShutdown()
            try await running.value
        }
        let offline = receiver.deliveries.filter { $0.type == "presence.offline_for" }
        #expect(offline.map(\.id) == ["msg_offline_1500000_1500000", "msg_offline_7000000_7000000"])
        #expect(offline.map(\.offsets) == [[1_500_000], [7_000_000]])
        #expect(offline.allSatisfy { $0.signatureValid })
    }
}
