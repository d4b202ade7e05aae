import RollCallCore
import RollCallWire
import Testing

@testable import RollCallBroker

/// Publications wait until the presence log holds what they show (Machine/PublicationHold.swift), on a clock the
/// test moves and with the writer's progress as the test says.
@Suite("Publications wait for the presence log")
struct PublicationHoldTests {
    /// A machine that keeps a log, its hold over a log that holds nothing yet.
    static func logging() -> Scripted {
        var broker = Scripted()
        broker.machine.core.startLog(after: 0)
        broker.machine.logEpoch = "L1"
        broker.machine.hold = PublicationHold(logged: 0)
        return broker
    }

    /// The users of the records that `effects` publish, in order.
    static func published(_ effects: [BrokerMachine.Effect]) -> [String] {
        effects.compactMap { if case .publish(let record) = $0 { record.user.rawValue } else { nil } }
    }

    static func warnings(_ effects: [BrokerMachine.Effect]) -> [String] {
        effects.compactMap { if case .warning(let message, _) = $0 { message } else { nil } }
    }

    /// The effects the loop takes with the writer at `logged`, at `monotonic` on the loop's monotonic clock.
    static func take(_ broker: inout Scripted, logged: UInt64, monotonic: Int64 = 0) -> [BrokerMachine.Effect] {
        var out: [BrokerMachine.Effect] = []
        _ = broker.machine.takeEffects(into: &out, logged: logged, monotonic: monotonic)
        return out
    }

    static func pingOffset(_ broker: inout Scripted) -> UInt64? {
        guard case .success(.ping(let info)) = broker.request(.ping) else { return nil }
        return info.log?.offset
    }

    /// A record goes out once the writer has committed its offset, not before; `ping` reports no offset beyond what
    /// is out, so a cursor taken from it never names a transition a crash could lose.
    @Test func aRecordWaitsForItsCommit() throws {
        var broker = Self.logging()
        _ = try broker.hello("alice")
        let offset = broker.machine.core.logOffset
        #expect(offset > 0)
        #expect(Self.published(Self.take(&broker, logged: offset - 1)) == [])
        #expect(broker.machine.hold?.isHolding == true)
        #expect(Self.pingOffset(&broker) == offset - 1)
        #expect(broker.machine.hasEffects(logged: offset, monotonic: 0))
        #expect(Self.published(Self.take(&broker, logged: offset)) == ["alice"])
        #expect(broker.machine.hold?.isHolding == false)
        #expect(Self.pingOffset(&broker) == offset)
        // With the log caught up, a new record goes out at once.
        _ = try broker.hello("bob")
        #expect(Self.published(Self.take(&broker, logged: broker.machine.core.logOffset)) == ["bob"])
    }

    /// One queue: a record whose offset is committed still waits behind an earlier one that is not, so each topic
    /// (and every subscriber) sees the broker's order. What publishes nothing never waits.
    @Test func orderIsKeptAndOnlyPublicationsWait() throws {
        var broker = Self.logging()
        _ = try broker.hello("alice")
        let alice = broker.machine.core.logOffset
        _ = try broker.hello("bob")
        let bob = broker.machine.core.logOffset
        broker.machine.effects.append(.notice("a step", [:]))
        let first = Self.take(&broker, logged: 0)
        #expect(Self.published(first) == [])
        #expect(first.count == 1)  // the notice
        #expect(Self.published(Self.take(&broker, logged: alice)) == ["alice"])
        #expect(Self.pingOffset(&broker) == bob - 1)
        #expect(Self.published(Self.take(&broker, logged: bob)) == ["bob"])

        var hold = PublicationHold(logged: 0)
        var effects: [BrokerMachine.Effect] = [
            .publish(
                PresenceRecord(
                    user: "carol".id, status: .online, since: nil, lastSeen: nil, sessions: 1, seq: 9, offset: 9)),
            .publish(
                PresenceRecord(
                    user: "dave".id, status: .online, since: nil, lastSeen: nil, sessions: 1, seq: 4, offset: 4)),
        ]
        var out: [BrokerMachine.Effect] = []
        hold.pass(&effects, to: &out, logged: 4, logOffset: 9, now: 0)
        #expect(Self.published(out) == [])  // dave is in the log, but carol is ahead of him
        #expect(hold.visible(logOffset: 9) == 3)
        hold.pass(&effects, to: &out, logged: 9, logOffset: 9, now: 0)
        #expect(Self.published(out) == ["carol", "dave"])
    }

    /// A disk that does not commit delays presence by ``PublicationHold/longestWait`` at most, on the loop's
    /// monotonic clock: nothing goes out at 999 ms, the record at 1 s, with one warning, and no second warning within
    /// the minute. The broker's clock plays no part (test mode's jumps are not waits).
    @Test func aSlowLogDelaysPresenceOneSecondAtMost() throws {
        var broker = Self.logging()
        let start: Int64 = 5_000
        _ = try broker.hello("alice")
        _ = Self.take(&broker, logged: 0, monotonic: start)
        #expect(broker.machine.hold?.nextDeadline == start + PublicationHold.longestWait)
        broker.now = broker.now + 3_600_000
        let almost = start + PublicationHold.longestWait - 1
        #expect(!broker.machine.hasEffects(logged: 0, monotonic: almost))
        #expect(Self.published(Self.take(&broker, logged: 0, monotonic: almost)) == [])
        let due = start + PublicationHold.longestWait
        #expect(broker.machine.hasEffects(logged: 0, monotonic: due))
        let late = Self.take(&broker, logged: 0, monotonic: due)
        #expect(Self.published(late) == ["alice"])
        #expect(Self.warnings(late).count == 1)
        #expect(broker.machine.hold?.releasedLate == 1)
        _ = try broker.hello("bob")
        _ = Self.take(&broker, logged: 0, monotonic: due)
        let again = Self.take(&broker, logged: 0, monotonic: due + PublicationHold.longestWait)
        #expect(Self.published(again) == ["bob"])
        #expect(Self.warnings(again).isEmpty)
    }

    /// While the writer fails (the loop says `.max`), nothing waits, what waited included: presence does not stop for
    /// a broken disk (the log then starts over under a new epoch, docs/history.md).
    @Test func aFailingWriterHoldsNothing() throws {
        var broker = Self.logging()
        _ = try broker.hello("alice")
        _ = Self.take(&broker, logged: 0)
        _ = try broker.hello("bob")
        #expect(Self.published(Self.take(&broker, logged: .max)) == ["alice", "bob"])
        #expect(Self.pingOffset(&broker) == broker.machine.core.logOffset)
    }

    /// A broker without a log holds nothing: the effects are handed over as they are.
    @Test func withoutALogNothingWaits() throws {
        var broker = Scripted()
        _ = try broker.hello("alice")
        #expect(Self.published(Self.take(&broker, logged: 0)) == ["alice"])
    }
}
