import RollCallClientCore
import RollCallCore
import RollCallWire
import Testing

/// A WebSocket watcher resumes the users it followed from the highest offset it received (docs/history.md): the
/// transitions missed while away come in order instead of only the current records.
@Suite("Watch machine: resume after a disconnect")
struct WatchMachineResumeTests {
    let bob = Topic.presence(Sent.bob)
    let carol = Topic.presence(Sent.carol)

    private func record(_ user: UserID = Sent.bob, _ status: Status = .online, seq: UInt64, offset: UInt64)
        -> PresenceRecord
    {
        var record = Sent.record(user, status, seq: seq)
        record.offset = offset
        return record
    }

    /// Connected to a broker keeping log `L1`, following bob and carol, with offsets up to 20 received.
    private func watching() -> WatchMachine {
        var m = WatchMachine(configuration: .webSocket, now: 0, seed: 7)
        _ = m.follow(bob, now: 0)
        _ = m.follow(carol, now: 0)
        _ = m.tick(now: 0)
        _ = m.connected(now: 0)
        m.logEpoch("L1")
        _ = m.record(record(seq: 5, offset: 10), now: 1)
        _ = m.record(record(Sent.carol, seq: 6, offset: 20), now: 2)
        _ = m.record(record(seq: 7, offset: 15), now: 3)  // an older offset moves nothing back
        return m
    }

    @Test func reconnectResumesTheUsersFollowedFromTheHighestOffset() {
        var m = watching()
        #expect(m.log.epoch == "L1" && m.log.offset == 20)
        #expect(m.disconnected(now: 10) == [.connect])
        #expect(
            m.connected(now: 11) == [
                .subscribe([.broker]), .resume([bob, carol], after: 20, logEpoch: "L1"),
            ])
        // The missed transitions come in order and pass the seq rule; no current value is awaited for them.
        #expect(
            m.record(record(Sent.bob, .away, seq: 8, offset: 30), now: 12) == [
                .deliver(record(Sent.bob, .away, seq: 8, offset: 30))
            ])
        #expect(m.record(record(Sent.bob, .away, seq: 8, offset: 30), now: 13) == [], "not twice")
        #expect(m.log.offset == 30)
    }

    /// A user followed while the connection was down was never subscribed: it brings its current value instead.
    @Test func aTopicFollowedWhileAwayIsSubscribedAfresh() {
        var m = watching()
        _ = m.disconnected(now: 10)
        let dave = Topic.presence(UserID(validating: "dave")!)
        #expect(m.follow(dave, now: 10) == [])
        #expect(
            m.connected(now: 11) == [
                .subscribe([.broker, dave]), .resume([bob, carol], after: 20, logEpoch: "L1"),
            ])
        // A user unfollowed meanwhile is not resumed.
        _ = m.disconnected(now: 12)
        _ = m.unfollow(carol)
        #expect(m.connected(now: 13) == [.subscribe([.broker]), .resume([bob, dave], after: 20, logEpoch: "L1")])
    }

    /// Without a log named (no `ping` answer yet, or a broker that keeps none) or before any offset came, a new
    /// connection subscribes afresh.
    @Test func noLogOrNoOffsetSubscribesAfresh() {
        var m = WatchMachine(configuration: .webSocket, now: 0, seed: 7)
        _ = m.follow(bob, now: 0)
        _ = m.tick(now: 0)
        _ = m.connected(now: 0)
        _ = m.record(record(seq: 5, offset: 10), now: 1)  // no log told
        _ = m.disconnected(now: 2)
        #expect(m.connected(now: 3) == [.subscribe([.broker, bob])])
        m.logEpoch(nil)  // a broker without a log
        _ = m.disconnected(now: 4)
        #expect(m.connected(now: 5) == [.subscribe([.broker, bob])])
        #expect(m.log.epoch == nil)
    }

    /// A refused resume (`snapshot_required`) subscribes afresh, and the current value that brings is delivered
    /// even at a seq already seen (a new follower may wait for it).
    @Test func aRefusedResumeSubscribesAfresh() {
        var m = watching()
        _ = m.disconnected(now: 10)
        _ = m.connected(now: 11)
        #expect(m.resumeRefused([bob, carol], now: 12) == [.subscribe([bob, carol])])
        #expect(m.record(record(seq: 7, offset: 15), now: 13) == [.deliver(record(seq: 7, offset: 15))])
        // A refusal for a topic unfollowed since subscribes nothing.
        _ = m.unfollow(bob)
        _ = m.unfollow(carol)
        #expect(m.resumeRefused([bob, carol], now: 14) == [])
    }

    /// A broker with another log (its data wiped): the offsets of the old log mean nothing there. The offsets this
    /// connection received before its `ping` answered are the new log's, and the next resume starts from them.
    @Test func anotherLogStartsTheResumePointOver() {
        var m = watching()
        _ = m.disconnected(now: 10)
        _ = m.connected(now: 11)  // resumes from L1's 20: the broker will refuse it
        _ = m.resumeRefused([bob, carol], now: 12)
        _ = m.record(record(seq: 9, offset: 3), now: 13)  // the current record, from the new log
        m.logEpoch("L2")
        #expect(m.log.epoch == "L2" && m.log.offset == 3)
        _ = m.disconnected(now: 14)
        #expect(m.connected(now: 15) == [.subscribe([.broker]), .resume([bob, carol], after: 3, logEpoch: "L2")])
        // The same log told again changes nothing.
        m.logEpoch("L2")
        #expect(m.log.offset == 3)
    }

    /// A ZeroMQ watcher never resumes: the XPUB keeps nothing per subscriber.
    @Test func zeroMQNeverResumes() {
        var m = WatchMachine(configuration: .zeroMQ, now: 0, seed: 7)
        _ = m.follow(bob, now: 0)
        m.logEpoch("L1")
        _ = m.record(record(seq: 5, offset: 10), now: 1)
        #expect(m.connected(now: 2) == [.subscribe([bob])])
    }
}
