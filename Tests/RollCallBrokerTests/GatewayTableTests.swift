import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

@testable import RollCallBroker

/// A sink that records nothing: the table never writes to a connection itself.
final class SilentSink: GatewayConnectionSink {
    func framesWaiting() {}
    func close(code: UInt16, reason: String) {}
    func resumeReading() {}
}

/// The WebSocket connections' subscriptions, decided without a socket.
@Suite("WebSocket subscriptions")
struct GatewayTableTests {
    static func table(_ peers: (ConnectionID, Access)...) -> GatewayTable {
        var table = GatewayTable()
        for (id, access) in peers {
            table.peers[id] = GatewayTable.Peer(
                outbox: GatewayOutbox(limitBytes: 1_000, sink: SilentSink()), access: access)
        }
        return table
    }

    static let one = ConnectionID(1)
    static let two = ConnectionID(2)

    /// A connection past its subscription cap gets `limit`, and none of the topics of that request.
    @Test func pastTheCapIsLimitAndNothingChanges() throws {
        var table = Self.table((Self.one, .open))
        let first = table.subscribe(Self.one, to: [.presence("a".id), .presence("b".id)], maxTopics: 3)
        #expect(try first?.get() == [.presence("a".id), .presence("b".id)])
        let second = table.subscribe(Self.one, to: [.presence("c".id), .presence("d".id)], maxTopics: 3)
        guard case .failure(let error)? = second else {
            Issue.record("subscribed past the cap: \(String(describing: second))")
            return
        }
        #expect(error.code == .limit)
        #expect(table.peers[Self.one]?.topics.count == 2)
        #expect(table.receivers(of: Topic.presence("c".id).bytes).exact == nil)
    }

    /// Topics it already has do not count again, and are not new (no second last value).
    @Test func resubscribingIsNotNew() throws {
        var table = Self.table((Self.one, .open))
        _ = table.subscribe(Self.one, to: [.presence("a".id)], maxTopics: 2)
        let again = table.subscribe(
            Self.one, to: [.presence("a".id), .presence("b".id), .presence("b".id)], maxTopics: 2)
        #expect(try again?.get() == [.presence("b".id)])
    }

    /// A `user` token subscribes to exact topics only: `presence/` (every user) is `forbidden`, and the request's
    /// other topics are not taken either; a reader may.
    @Test func userTokenMayNotSubscribeToEveryone() throws {
        var table = Self.table((Self.one, .role(.user("alice".id))), (Self.two, .role(.reader)))
        let refused = table.subscribe(Self.one, to: [.presence("bob".id), .allPresence], maxTopics: 10)
        guard case .failure(let error)? = refused else {
            Issue.record("a user token subscribed to every user")
            return
        }
        #expect(error.code == .forbidden)
        #expect(table.peers[Self.one]?.topics.isEmpty == true)
        let reader = table.subscribe(Self.two, to: [.allPresence], maxTopics: 10)
        #expect(try reader?.get() == [.allPresence])
        #expect(table.receivers(of: Topic.presence("bob".id).bytes).everyUser)
        #expect(!table.receivers(of: Topic.group("g".group).bytes).everyUser)
    }

    /// A revoked token subscribes to nothing.
    @Test func revokedSubscribesToNothing() {
        var table = Self.table((Self.one, .revoked))
        guard case .failure(let error)? = table.subscribe(Self.one, to: [.broker], maxTopics: 10) else {
            Issue.record("a revoked token subscribed")
            return
        }
        #expect(error.code == .forbidden)
    }

    /// A connection removed, or marked too slow, loses its subscriptions at once; the other keeps its own.
    @Test func removedAndSlowConnectionsLoseTheirSubscriptions() {
        var table = Self.table((Self.one, .open), (Self.two, .open))
        let topic = Topic.presence("a".id)
        _ = table.subscribe(Self.one, to: [topic], maxTopics: 5)
        _ = table.subscribe(Self.two, to: [topic], maxTopics: 5)
        #expect(table.receivers(of: topic.bytes).exact == [Self.one, Self.two])
        table.markDropping(Self.one)
        table.markDropping(Self.one)
        #expect(table.receivers(of: topic.bytes).exact == [Self.two])
        #expect(table.dropping == [Self.one])
        #expect(table.peers[Self.one]?.dropping == true)
        table.remove(Self.two)
        #expect(table.hasNoSubscribers)
        let gone = table.subscribe(Self.two, to: [topic], maxTopics: 5)
        #expect(gone == nil)
    }

    /// Unsubscribing from a topic it never had changes nothing; from one it had, frees a place under the cap.
    @Test func unsubscribingFreesAPlace() throws {
        var table = Self.table((Self.one, .open))
        _ = table.subscribe(Self.one, to: [.presence("a".id)], maxTopics: 1)
        table.unsubscribe(Self.one, from: Topic.presence("zzz".id).bytes)
        #expect(table.peers[Self.one]?.topics.count == 1)
        table.unsubscribe(Self.one, from: Topic.presence("a".id).bytes)
        let freed = table.subscribe(Self.one, to: [.presence("b".id)], maxTopics: 1)
        #expect(try freed?.get() == [.presence("b".id)])
    }
}

/// Replays asked for by subscriptions: at most one per topic per interval, none lost.
@Suite("Replay coalescer")
struct ReplayCoalescerTests {
    /// Subscriptions to one topic inside the interval are one replay when it closes; another topic is not held.
    @Test func replaysOfOneTopicCoalesce() {
        var replays = ReplayCoalescer(interval: 100)
        let alice = Topic.presence("alice".id)
        let asked = [
            replays.request(alice, now: 0), replays.request(alice, now: 10), replays.request(alice, now: 20),
            replays.request(.presence("bob".id), now: 20),
        ]
        #expect(asked == [true, false, false, true])
        #expect(replays.nextDue == 100)
        let early = replays.takeDue(now: 99)
        let due = replays.takeDue(now: 100)
        let later = replays.takeDue(now: 500)
        #expect(early.isEmpty)
        #expect(due == [alice])
        #expect(later.isEmpty)
        #expect(replays.nextDue == nil)
    }

    /// After the interval, a subscription is replayed at once again.
    @Test func afterTheIntervalAtOnce() {
        var replays = ReplayCoalescer(interval: 100)
        let topic = Topic.group("team".group)
        let asked = [replays.request(topic, now: 0), replays.request(topic, now: 100)]
        #expect(asked == [true, true])
        #expect(replays.nextDue == nil)
    }
}
