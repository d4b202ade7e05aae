import Testing

@testable import RollCallCore

/// Log offsets (PresenceCore+Log.swift): numbered by the core as transitions are made.
@Suite("Log offsets")
struct LogOffsetTests {
    /// Without a log records carry no offset and nothing waits to be logged.
    @Test func noLogNoOffsets() {
        var h = Harness()
        let (_, updates) = h.hello("alice")
        #expect(updates.map(\.offset) == [nil])
        #expect(!h.core.hasTransitions)
    }

    /// With a log every record takes the next offset, above the one the log ended at and never behind the clock in
    /// microseconds; the transitions come out in order with the records as published, and the current record
    /// carries its offset.
    @Test func transitionsTakeGrowingOffsets() throws {
        var h = Harness()
        let restartedAbove = UInt64(h.now.milliseconds) * 1_000 + 500
        h.core.startLog(after: restartedAbove)
        let (_, first) = h.hello("alice")
        let (_, second) = h.hello("bob")
        h.clock.advance(10)
        let (_, third) = h.hello("alice", status: .busy)
        let published = first + second + third
        #expect(published.map(\.offset) == [restartedAbove + 1, restartedAbove + 2, h.now.microseconds])
        let transitions = h.core.takeTransitions()
        #expect(transitions.map(\.record) == published)
        #expect(transitions.map(\.offset) == published.compactMap(\.offset))
        #expect(transitions.last?.time == h.now)
        #expect(!h.core.hasTransitions)
        #expect(h.core.logOffset == h.now.microseconds)
        #expect(h.core.record(of: "alice".id, now: h.now).offset == h.now.microseconds)
        // A heartbeat changes no record: no offset, no transition.
        _ = h.core.heartbeat(session: SessionID("s1"), connection: nil, now: h.now)
        #expect(!h.core.hasTransitions)
    }
}

extension BrokerTime {
    fileprivate var microseconds: UInt64 { UInt64(milliseconds) * 1_000 }
}
