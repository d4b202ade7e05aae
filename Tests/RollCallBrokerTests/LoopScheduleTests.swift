import RollCallCore
import Testing

@testable import RollCallBroker

/// The loop's heartbeat, store and trim timers on a clock the test moves.
@Suite("Loop schedule")
struct LoopScheduleTests {
    static func at(_ milliseconds: Int64) -> BrokerTime { BrokerTime(milliseconds: milliseconds) }

    static func schedule() -> LoopSchedule {
        LoopSchedule(heartbeatMilliseconds: 1_000, writeIntervalMilliseconds: 200, start: at(0))
    }

    /// The heartbeat goes out at the start, then once per interval; a long jump of the clock is one heartbeat.
    @Test func heartbeatOncePerIntervalAndOncePerJump() {
        var schedule = Self.schedule()
        let start = [schedule.heartbeatDue(now: Self.at(0)), schedule.heartbeatDue(now: Self.at(999))]
        #expect(start == [true, false])
        let jump = [
            schedule.heartbeatDue(now: Self.at(31_536_000_000)), schedule.heartbeatDue(now: Self.at(31_536_000_001)),
        ]
        #expect(jump == [true, false])
        #expect(schedule.nextHeartbeat == Self.at(31_536_001_000))
    }

    /// Changes go to the store one write interval after the first change noted, in one batch; without changes
    /// nothing is written and no timer runs.
    @Test func changesGoToTheStoreOncePerInterval() {
        var schedule = Self.schedule()
        let idle = schedule.writeDue(now: Self.at(10), hasChanges: false)
        #expect(!idle)
        #expect(schedule.nextWrite == nil)
        let noted = schedule.writeDue(now: Self.at(50), hasChanges: true)
        #expect(!noted)
        #expect(schedule.nextWrite == Self.at(250))
        let early = schedule.writeDue(now: Self.at(249), hasChanges: true)
        let due = schedule.writeDue(now: Self.at(250), hasChanges: true)
        #expect([early, due] == [false, true])
        #expect(schedule.nextWrite == nil)
    }

    /// The deadline is the earliest of the timers and the machine's own.
    @Test func nextDeadlineIsTheEarliest() {
        var schedule = Self.schedule()
        _ = schedule.heartbeatDue(now: Self.at(0))
        #expect(schedule.nextDeadline(with: nil) == Self.at(1_000))
        #expect(schedule.nextDeadline(with: Self.at(700)) == Self.at(700))
        _ = schedule.writeDue(now: Self.at(100), hasChanges: true)
        #expect(schedule.nextDeadline(with: Self.at(700)) == Self.at(300))
        schedule.connectionClosed(now: Self.at(0))
        #expect(schedule.nextDeadline(with: nil) == Self.at(300))
    }

    /// A trim falls due a second after a close; while the loop is busy it waits for a quiet round, at most 10 s.
    @Test func trimWaitsForAQuietRoundAtMostTenSeconds() {
        var schedule = Self.schedule()
        schedule.connectionClosed(now: Self.at(0))
        schedule.connectionClosed(now: Self.at(500))
        let notYet = schedule.trimDue(now: Self.at(999), busy: false)
        #expect(!notYet)
        var busyRounds = 0
        var now: Int64 = 1_000
        while !schedule.trimDue(now: Self.at(now), busy: true) {
            busyRounds += 1
            now += LoopSchedule.trimRetryMilliseconds
            guard now < 60_000 else { break }
        }
        #expect(now == 1_000 + LoopSchedule.trimPostponeMilliseconds)
        #expect(busyRounds == 100)
        #expect(schedule.trimAt == nil)
    }

    /// A quiet round trims at once when due.
    @Test func quietRoundTrimsAtOnce() {
        var schedule = Self.schedule()
        schedule.connectionClosed(now: Self.at(0))
        let due = schedule.trimDue(now: Self.at(1_000), busy: false)
        #expect(due)
        let again = schedule.trimDue(now: Self.at(5_000), busy: false)
        #expect(!again)
    }
}
