import Foundation
import Testing

@testable import RollCallKit

@MainActor
@Suite("Presence store")
struct PresenceStoreTests {
    let bob = UserID(validating: "bob")!
    let team = GroupID(validating: "team")!

    func record(_ status: Status, seq: UInt64, lastSeen: Int64? = nil) -> PresenceRecord {
        PresenceRecord(
            user: bob, status: status, since: BrokerTime(milliseconds: 1), lastSeen: lastSeen.map(BrokerTime.init),
            sessions: status == .offline ? 0 : 1, seq: seq)
    }

    /// A user the store knows nothing of reads as offline, unknown and stale; a record makes it known and fresh.
    @Test func unknownThenKnown() {
        let store = PresenceStore()
        #expect(store[bob] == .unknown(bob))
        store.apply(record(.busy, seq: 5))
        #expect(store[bob].status == .busy)
        #expect(store[bob].known && !store[bob].stale)
    }

    /// A group message sets the header's counts and applies the records it carries.
    @Test func groupHeaderCounts() {
        let store = PresenceStore()
        store.apply(
            GroupUpdate(
                group: team, counts: StatusCounts(online: 2, busy: 1, offline: 2), changed: [record(.online, seq: 9)],
                removed: [], seq: 3))
        #expect(store.group(team).online == 3)
        #expect(store.group(team).total == 5)
        #expect(store[bob].status == .online)
    }

    /// When the broker falls silent every dot turns stale, and a fresh record makes its user fresh again.
    @Test func brokerLostMakesEverythingStale() {
        let store = PresenceStore()
        store.apply(record(.online, seq: 1))
        store.setBrokerLost(true)
        #expect(store[bob].stale)
        store.setBrokerLost(false)
        #expect(store[bob].stale)
        store.apply(record(.online, seq: 1))
        #expect(!store[bob].stale)
    }

    /// "Last seen" counts on the broker's clock: a device clock 10 minutes behind still reads 5 minutes.
    @Test func lastSeenOnTheBrokersClock() {
        let store = PresenceStore()
        store.apply(record(.offline, seq: 2, lastSeen: 1_000_000))
        store.setClockOffset(brokerTime: 1_300_000, deviceTime: 700_000)
        #expect(store.lastSeenAgo(bob, now: 700_000) == 300_000)
    }

    /// The broker's clock offset moves only when it is off by more than a second, so that views showing "last seen"
    /// are not redrawn at every heartbeat.
    @Test func clockOffsetIgnoresJitter() {
        let store = PresenceStore()
        store.setClockOffset(brokerTime: 10_000, deviceTime: 5_000)
        #expect(store.brokerClockOffset == 5_000)
        store.setClockOffset(brokerTime: 11_000, deviceTime: 5_990)
        #expect(store.brokerClockOffset == 5_000)
        store.setClockOffset(brokerTime: 20_000, deviceTime: 5_000)
        #expect(store.brokerClockOffset == 15_000)
    }

    /// The cache file keeps the records across launches, and a store made from it shows them stale.
    @Test func cacheRoundTrip() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-cache-\(UUID()).jsonl")
        defer { try? FileManager.default.removeItem(at: file) }
        let store = PresenceStore()
        store.apply(record(.away, seq: 7, lastSeen: 42))
        try PresenceCache(url: file).save(store.records)
        let cold = PresenceStore(cached: PresenceCache(url: file).load())
        #expect(cold[bob].status == .away)
        #expect(cold[bob].lastSeen == 42)
        #expect(cold[bob].stale)
        #expect(PresenceCache(url: file.appendingPathExtension("missing")).load().isEmpty)
    }
}
