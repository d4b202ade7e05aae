import RollCallClientCore
import RollCallCore
import RollCallWire
import Testing

/// Shorthands for what a broker sends a watcher.
enum Sent {
    static let bob = UserID(validating: "bob")!
    static let carol = UserID(validating: "carol")!
    static let team = GroupID(validating: "team")!

    static func record(_ user: UserID = bob, _ status: Status = .online, seq: UInt64) -> PresenceRecord {
        PresenceRecord(
            user: user, status: status, since: BrokerTime(milliseconds: 1), lastSeen: nil, sessions: 1, seq: seq)
    }

    static func heartbeat(epoch: String = "e1", dropped: UInt64 = 0, interval: Int64 = 1_000) -> BrokerHeartbeat {
        BrokerHeartbeat(
            broker: "b", epoch: epoch, time: BrokerTime(milliseconds: 1), intervalMilliseconds: interval,
            usersAvailable: 0, sessions: 0, dropped: dropped)
    }

    static func group(seq: UInt64, online: Int = 1, changed: [PresenceRecord] = []) -> GroupUpdate {
        GroupUpdate(group: team, counts: StatusCounts(online: online), changed: changed, removed: [], seq: seq)
    }
}

@Suite("Watch machine")
struct WatchMachineTests {
    /// A WebSocket watcher connected on its first tick subscribes to what was followed before, and to `broker/`.
    @Test func connectsAtStartAndSubscribesWhatIsFollowed() {
        var m = WatchMachine(configuration: .webSocket, now: 0, seed: 7)
        #expect(m.follow(.presence(Sent.bob), now: 0) == [])
        #expect(m.tick(now: 0) == [.connect])
        #expect(m.connected(now: 5) == [.subscribe([.broker, .presence(Sent.bob)])])
        #expect(m.follow(.group(Sent.team), now: 6) == [.subscribe([.group(Sent.team)])])
    }

    /// The current value a subscription brings is delivered even at a seq already seen; a repeat of it, or an
    /// older record, is not; a newer one is.
    @Test func currentValueFirstThenTheSeqRule() {
        var m = connected()
        #expect(m.record(Sent.record(seq: 10), now: 10) == [.deliver(Sent.record(seq: 10))])
        #expect(m.record(Sent.record(seq: 10), now: 11) == [])
        #expect(m.record(Sent.record(seq: 9), now: 12) == [])
        #expect(
            m.record(Sent.record(Sent.bob, .busy, seq: 11), now: 13) == [
                .deliver(Sent.record(Sent.bob, .busy, seq: 11))
            ])
        // A second follower of bob gets the current value although its seq was delivered already.
        #expect(m.follow(.presence(Sent.bob), now: 14) == [.subscribe([.presence(Sent.bob)])])
        #expect(
            m.record(Sent.record(Sent.bob, .busy, seq: 11), now: 15) == [
                .deliver(Sent.record(Sent.bob, .busy, seq: 11))
            ])
    }

    /// On a WebSocket one unsubscribe drops a topic, so it is sent only when its last follower leaves; libzmq
    /// counts subscriptions, so a ZeroMQ watcher sends one per follower.
    @Test func unfollowUnsubscribesByTheTransportsCount() {
        var ws = connected()
        _ = ws.follow(.presence(Sent.bob), now: 1)
        #expect(ws.unfollow(.presence(Sent.bob)) == [])
        #expect(ws.unfollow(.presence(Sent.bob)) == [.unsubscribe([.presence(Sent.bob)])])
        #expect(ws.unfollow(.presence(Sent.bob)) == [])
        var zmq = WatchMachine(configuration: .zeroMQ, now: 0, seed: 7)
        _ = zmq.follow(.presence(Sent.bob), now: 0)
        _ = zmq.follow(.presence(Sent.bob), now: 0)
        #expect(zmq.unfollow(.presence(Sent.bob)) == [.unsubscribe([.presence(Sent.bob)])])
        #expect(zmq.unfollow(.presence(Sent.bob)) == [.unsubscribe([.presence(Sent.bob)])])
    }

    /// Unfollowing forgets the user's seq: following again later delivers whatever the subscription brings.
    @Test func unfollowForgetsTheSeq() {
        var m = connected()
        _ = m.record(Sent.record(seq: 10), now: 1)
        _ = m.unfollow(.presence(Sent.bob))
        #expect(m.userSeqs[Sent.bob] == nil)
    }

    /// The broker is lost after three heartbeat intervals of silence on the test's clock, not a millisecond
    /// before; on a WebSocket the silent connection is closed too.
    @Test func brokerLostAfterThreeSilentIntervals() {
        var m = connected()
        #expect(m.heartbeat(Sent.heartbeat(interval: 500), now: 100) == [.broker(.connected(epoch: "e1"))])
        #expect(m.nextDeadline == 1_600)
        #expect(!m.tick(now: 1_599).contains(.broker(.lost)))
        #expect(m.tick(now: 1_600) == [.broker(.lost), .closeConnection])
        #expect(m.brokerLost)
    }

    /// A ZeroMQ watcher reports the silence once and then waits for heartbeats (libzmq reconnects by itself).
    @Test func zeroMQReportsSilenceOnce() {
        var m = WatchMachine(configuration: .zeroMQ, now: 0, seed: 7)
        _ = m.follow(.broker, now: 0)
        _ = m.heartbeat(Sent.heartbeat(), now: 0)
        #expect(m.tick(now: 3_000) == [.broker(.lost)])
        #expect(m.nextDeadline == nil)
        #expect(m.tick(now: 10_000) == [])
    }

    /// Heartbeats back with the same epoch after a silence: recovered, then the followed topics are asked again and
    /// the users delivered are queried.
    @Test func recoveryResubscribesAndQueries() {
        var m = connected()
        _ = m.follow(.group(Sent.team), now: 0)
        _ = m.record(Sent.record(seq: 10), now: 1)
        _ = m.heartbeat(Sent.heartbeat(), now: 2)
        _ = m.tick(now: 3_002)
        #expect(
            m.heartbeat(Sent.heartbeat(), now: 4_000) == [
                .broker(.recovered(epoch: "e1")), .resubscribe([.group(Sent.team), .presence(Sent.bob)]),
                .query([Sent.bob]),
            ])
        // The query's answers are delivered only when newer.
        #expect(
            m.queried([Sent.record(seq: 10), Sent.record(Sent.carol, seq: 3)], now: 4_010) == [
                .deliver(Sent.record(Sent.carol, seq: 3))
            ])
    }

    /// A new epoch forgets every seq, so a record of the new run is delivered even with a lower seq.
    @Test func restartForgetsSeqs() {
        var m = connected()
        _ = m.heartbeat(Sent.heartbeat(epoch: "e1"), now: 0)
        _ = m.record(Sent.record(seq: 50), now: 1)
        let actions = m.heartbeat(Sent.heartbeat(epoch: "e2"), now: 500)
        #expect(actions.first == .broker(.restarted(epoch: "e2")))
        #expect(m.userSeqs.isEmpty)
        #expect(m.record(Sent.record(seq: 40), now: 501) == [.deliver(Sent.record(seq: 40))])
    }

    /// Drops that keep growing resync at most once a second, then doubling: the second waits for its turn.
    @Test func fellBehindResyncsAreSpaced() {
        var m = connected()
        _ = m.record(Sent.record(seq: 10), now: 0)
        _ = m.heartbeat(Sent.heartbeat(dropped: 0), now: 0)
        #expect(m.heartbeat(Sent.heartbeat(dropped: 1), now: 100).contains(.query([Sent.bob])))
        #expect(m.heartbeat(Sent.heartbeat(dropped: 2), now: 200) == [.broker(.fellBehind(epoch: "e1"))])
        #expect(m.nextDeadline == 1_100)
        #expect(m.tick(now: 1_100).contains(.query([Sent.bob])))
        // Still dropping: the next is 2 s after that one.
        _ = m.heartbeat(Sent.heartbeat(dropped: 3), now: 1_200)
        #expect(!m.tick(now: 3_099).contains(.query([Sent.bob])))
        #expect(m.tick(now: 3_100).contains(.query([Sent.bob])))
    }

    /// A connection that worked and ended is made again at once; one that never answered waits for the jittered
    /// backoff (1 s ± 20 %, then 2 s ± 20 %); an answer starts the backoff over.
    @Test func reconnectsAtOnceThenWithTheBackoff() {
        var m = connected()
        m.answered()
        #expect(m.disconnected(now: 100) == [.connect])
        guard case .reconnectAfter(let first) = m.disconnected(now: 200).first else {
            Issue.record("no backoff after a failed attempt")
            return
        }
        #expect((800...1_200).contains(first))
        #expect(m.tick(now: 200 + first - 1) == [])
        #expect(m.tick(now: 200 + first) == [.connect])
        guard case .reconnectAfter(let second) = m.disconnected(now: 2_000).first else {
            Issue.record("no backoff after a second failed attempt")
            return
        }
        #expect((1_600...2_400).contains(second))
        _ = m.tick(now: 2_000 + second)
        _ = m.connected(now: 5_000)
        m.answered()
        #expect(m.disconnected(now: 6_000) == [.connect])
        guard case .reconnectAfter(let again) = m.disconnected(now: 6_001).first else {
            Issue.record("no backoff")
            return
        }
        #expect((800...1_200).contains(again))
    }

    /// A connection closed because the broker went silent on it is made again after the backoff, not at once, and
    /// only a heartbeat starts the backoff over: a broker too busy to publish is not stormed by reconnections.
    @Test func silenceReconnectsWithTheBackoff() {
        var m = connected()
        _ = m.heartbeat(Sent.heartbeat(), now: 0)
        #expect(m.tick(now: 3_000).contains(.closeConnection))
        guard case .reconnectAfter(let first) = m.disconnected(now: 3_001).first else {
            Issue.record("reconnected at once after a silence")
            return
        }
        #expect((800...1_200).contains(first))
        _ = m.tick(now: 3_001 + first)
        _ = m.connected(now: 4_500)
        m.answered()
        #expect(m.tick(now: 7_500).contains(.closeConnection))
        guard case .reconnectAfter(let second) = m.disconnected(now: 7_501).first else {
            Issue.record("reconnected at once after a second silence")
            return
        }
        #expect((1_600...2_400).contains(second))
    }

    /// `reconnectNow` cuts the backoff's wait, and closes an open connection on which the broker went silent.
    @Test func reconnectNowCutsTheWait() {
        var m = connected()
        _ = m.disconnected(now: 0)
        #expect(m.reconnectNow(now: 10) == [.connect])
        _ = m.connected(now: 20)
        _ = m.heartbeat(Sent.heartbeat(), now: 20)
        #expect(m.reconnectNow(now: 30) == [])
        _ = m.tick(now: 3_020)
        // Silent and closed: waiting for the end; a new silence while reconnecting is counted afresh.
        #expect(m.reconnectNow(now: 3_030) == [.closeConnection])
    }

    /// On ZeroMQ a topic whose current value has not come within 1 s is asked again, then 2 s later.
    @Test func unansweredSubscriptionIsAskedAgain() {
        var m = WatchMachine(configuration: .zeroMQ, now: 0, seed: 7)
        _ = m.follow(.presence(Sent.bob), now: 0)
        #expect(m.tick(now: 999) == [])
        #expect(m.tick(now: 1_000) == [.resubscribe([.presence(Sent.bob)])])
        #expect(m.tick(now: 2_999) == [])
        #expect(m.tick(now: 3_000) == [.resubscribe([.presence(Sent.bob)])])
        _ = m.record(Sent.record(seq: 1), now: 3_001)
        #expect(m.nextDeadline == nil)
    }

    /// The group seq rule: the aggregate a subscription brings comes through at an equal seq, a repeat does not, and
    /// a message's `changed` records pass the record seq rule.
    @Test func groupSeqRule() {
        var m = connected()
        _ = m.follow(.group(Sent.team), now: 0)
        _ = m.record(Sent.record(seq: 20), now: 1)
        #expect(m.group(Sent.group(seq: 5), now: 2) == [.deliverGroup(Sent.group(seq: 5))])
        #expect(m.group(Sent.group(seq: 5), now: 3) == [])
        let update = Sent.group(seq: 6, changed: [Sent.record(seq: 20), Sent.record(Sent.carol, seq: 4)])
        #expect(
            m.group(update, now: 4) == [
                .deliverGroup(Sent.group(seq: 6, changed: [Sent.record(Sent.carol, seq: 4)]))
            ])
        #expect(m.userSeqs[Sent.carol] == 4)
    }

    /// A ZeroMQ watcher hands a group message whole (its observers want the batch as sent) but still learns its
    /// records' seqs, so that an older record of the same user is dropped afterwards.
    @Test func zeroMQHandsGroupMessagesWhole() {
        var m = WatchMachine(configuration: .zeroMQ, now: 0, seed: 7)
        _ = m.follow(.group(Sent.team), now: 0)
        _ = m.follow(.presence(Sent.bob), now: 0)
        _ = m.record(Sent.record(seq: 20), now: 1)
        let update = Sent.group(seq: 6, changed: [Sent.record(seq: 20), Sent.record(Sent.carol, seq: 4)])
        #expect(m.group(update, now: 2) == [.deliverGroup(update)])
        #expect(m.userSeqs[Sent.carol] == 4)
    }

    /// A closed watcher connects no more.
    @Test func closedStaysClosed() {
        var m = WatchMachine(configuration: .webSocket, now: 0, seed: 7)
        m.close()
        #expect(m.tick(now: 0) == [])
        #expect(m.disconnected(now: 1) == [])
        #expect(m.reconnectNow(now: 2) == [])
    }

    /// A WebSocket watcher that follows bob, connected at 0.
    private func connected() -> WatchMachine {
        var m = WatchMachine(configuration: .webSocket, now: 0, seed: 7)
        _ = m.follow(.presence(Sent.bob), now: 0)
        _ = m.tick(now: 0)
        _ = m.connected(now: 0)
        return m
    }
}
