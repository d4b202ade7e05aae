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
                .resume([bob, carol], after: 20, logEpoch: "L1"), .subscribe([.broker]),
            ])
        m.resumeAnswered([bob, carol])
        // The missed transitions come in order and pass the seq rule; no current value is awaited for them.
        #expect(
            m.record(record(Sent.bob, .away, seq: 8, offset: 30), now: 12) == [
                .deliver(record(Sent.bob, .away, seq: 8, offset: 30))
            ])
        #expect(m.record(record(Sent.bob, .away, seq: 8, offset: 30), now: 13) == [], "not twice")
        #expect(m.log.offset == 30)
    }

    /// A user followed while the connection was down was never subscribed: it brings its current value instead,
    /// after the resume; it is resumed later only once that value has come.
    @Test func aTopicFollowedWhileAwayIsSubscribedAfresh() {
        var m = watching()
        _ = m.disconnected(now: 10)
        let dave = Topic.presence(UserID(validating: "dave")!)
        #expect(m.follow(dave, now: 10) == [])
        #expect(
            m.connected(now: 11) == [
                .resume([bob, carol], after: 20, logEpoch: "L1"), .subscribe([.broker, dave]),
            ])
        // Dropped before dave's current record came: dave is subscribed afresh again, not resumed.
        _ = m.disconnected(now: 12)
        #expect(
            m.connected(now: 13) == [
                .resume([bob, carol], after: 20, logEpoch: "L1"), .subscribe([.broker, dave]),
            ])
        m.resumeAnswered([bob, carol])
        _ = m.record(record(UserID(validating: "dave")!, seq: 3, offset: 12), now: 14)
        // A user unfollowed meanwhile is not resumed; dave, whose current record came, is.
        _ = m.disconnected(now: 15)
        _ = m.unfollow(carol)
        #expect(m.connected(now: 16) == [.resume([bob, dave], after: 20, logEpoch: "L1"), .subscribe([.broker])])
    }

    /// Until the resume's reply comes, no record moves the resume point: a fresh topic's current record (offset
    /// 500) read before a connection drops must not let the next resume skip the transitions this one had not
    /// delivered yet.
    @Test func theResumePointWaitsForTheResumesReply() {
        var m = watching()
        _ = m.disconnected(now: 10)
        let dave = Topic.presence(UserID(validating: "dave")!)
        _ = m.follow(dave, now: 10)
        _ = m.connected(now: 11)
        _ = m.record(record(UserID(validating: "dave")!, seq: 3, offset: 500), now: 12)
        #expect(m.log.offset == 20)
        _ = m.disconnected(now: 13)
        #expect(
            m.connected(now: 14) == [.resume([bob, carol, dave], after: 20, logEpoch: "L1"), .subscribe([.broker])])
        m.resumeAnswered([bob, carol, dave])
        _ = m.record(record(seq: 8, offset: 30), now: 15)
        #expect(m.log.offset == 30)
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
        // Only bob's current record came after the refusal: carol is subscribed afresh again.
        #expect(m.connected(now: 15) == [.resume([bob], after: 3, logEpoch: "L2"), .subscribe([.broker, carol])])
        // The same log told again changes nothing.
        m.logEpoch("L2")
        #expect(m.log.offset == 3)
    }

    /// A connection that resumed nothing subscribed every topic after its ping: the next one resumes from the ping's
    /// offset, though no record carried one (bob unknown at the subscription, his first transition still held for
    /// the log when the connection ended).
    @Test func aFreshConnectionResumesFromItsPingsOffset() {
        var m = WatchMachine(configuration: .webSocket, now: 0, seed: 7)
        _ = m.follow(bob, now: 0)
        _ = m.tick(now: 0)
        _ = m.connected(now: 0)
        m.logEpoch("L1", offset: 500)
        _ = m.record(Sent.record(Sent.bob, .offline, seq: 0), now: 1)  // unknown: no offset
        _ = m.disconnected(now: 2)
        #expect(m.connected(now: 3) == [.resume([bob], after: 500, logEpoch: "L1"), .subscribe([.broker])])
        // While that resume waits for its reply, the ping's offset moves nothing: its missed transitions may not have
        // come yet.
        m.logEpoch("L1", offset: 900)
        #expect(m.log.offset == 500)
        m.resumeAnswered([bob])
        _ = m.record(record(seq: 8, offset: 600), now: 4)
        #expect(m.log.offset == 600)
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
