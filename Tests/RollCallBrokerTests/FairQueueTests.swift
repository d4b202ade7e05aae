import Testing

@testable import RollCallBroker

/// The loop's one fair queue, for every door: turns per peer, order kept within a peer, bytes counted.
@Suite("Fair queue")
struct FairQueueTests {
    typealias Queue = FairQueue<String, String>

    /// Takes every turn, as `key:item` strings in the order served.
    static func drain(_ queue: inout Queue) -> [[String]] {
        var turns: [[String]] = []
        while let turn = queue.nextTurn() { turns.append(turn.items.map { "\(turn.key):\($0)" }) }
        return turns
    }

    /// A peer with 64 expensive reads queued delays another peer's heartbeat, queued behind one expensive read of
    /// its own, by one expensive read: the second turn is the heartbeat's.
    @Test func expensiveReadsDoNotStarveAnotherPeersHeartbeat() {
        var queue = Queue()
        for index in 0..<64 { queue.append("read\(index)", for: "greedy", expensive: true, bytes: 10) }
        queue.append("read", for: "honest", expensive: true, bytes: 10)
        queue.append("heartbeat", for: "honest", expensive: false, bytes: 1)
        let turns = Self.drain(&queue)
        #expect(turns.prefix(2) == [["greedy:read0"], ["honest:read", "honest:heartbeat"]])
        #expect(turns.count == 65)
        #expect(queue.isEmpty)
        #expect(queue.bytes == 0)
    }

    /// A peer held while its read is off the loop gets no turn: the rest of its turn goes back at the head of its
    /// queue, what it sends meanwhile queues behind, and once released it takes turns again in the same order.
    /// Other peers go on; a peer that closes while held leaves nothing behind.
    @Test func aHeldPeerWaitsInOrderUntilReleased() {
        var queue = Queue()
        queue.append("history", for: "a", expensive: true, bytes: 5)
        queue.append("ping", for: "a", expensive: false, bytes: 1)
        queue.append("group", for: "b", expensive: true, bytes: 5)
        let first = queue.nextTurn()
        #expect(first?.key == "a" && first?.items == ["history", "ping"])
        queue.hold("a", rest: [("ping", false, 1)])  // the history went to the reader; the ping waits behind it
        #expect(queue.isWaiting("a"))
        queue.append("heartbeat", for: "a", expensive: false, bytes: 1)
        #expect(queue.bytes == 7)
        #expect(Self.drain(&queue) == [["b:group"]])
        #expect(queue.isEmpty && queue.isWaiting("a"))
        queue.release("a")
        #expect(Self.drain(&queue) == [["a:ping", "a:heartbeat"]])
        #expect(!queue.isWaiting("a") && queue.bytes == 0)

        queue.hold("c")
        queue.append("status", for: "c", expensive: false, bytes: 1)
        #expect(queue.isEmpty)
        #expect(queue.removeAll(for: "c") == ["status"])
        queue.release("c")
        #expect(!queue.isWaiting("c") && queue.isEmpty && queue.bytes == 0)
    }

    /// The cheap items right behind an expensive one go in its turn; the next expensive one waits for the next.
    @Test func cheapItemsRideWithTheExpensiveOneBeforeThem() {
        var queue = Queue()
        queue.append("group", for: "a", expensive: true, bytes: 5)
        queue.append("status", for: "a", expensive: false, bytes: 1)
        queue.append("bye", for: "a", expensive: false, bytes: 1)
        queue.append("query", for: "a", expensive: true, bytes: 5)
        queue.append("ping", for: "a", expensive: false, bytes: 1)
        #expect(Self.drain(&queue) == [["a:group", "a:status", "a:bye"], ["a:query", "a:ping"]])
    }

    /// Peers take turns in the order they first queued; each peer's items keep their order.
    @Test func peersTakeTurns() {
        var queue = Queue()
        queue.append("1", for: "a", expensive: true, bytes: 1)
        queue.append("2", for: "a", expensive: true, bytes: 1)
        queue.append("1", for: "b", expensive: true, bytes: 1)
        queue.append("1", for: "c", expensive: true, bytes: 1)
        queue.append("2", for: "b", expensive: true, bytes: 1)
        #expect(Self.drain(&queue) == [["a:1"], ["b:1"], ["c:1"], ["a:2"], ["b:2"]])
    }

    /// A peer is waiting while it has items queued, so that its next items queue behind them.
    @Test func waitingUntilItsLastItemIsServed() {
        var queue = Queue()
        #expect(!queue.isWaiting("a"))
        queue.append("read", for: "a", expensive: true, bytes: 3)
        #expect(queue.isWaiting("a"))
        #expect(!queue.isWaiting("b"))
        #expect(queue.bytes == 3)
        _ = queue.nextTurn()
        #expect(!queue.isWaiting("a"))
        #expect(queue.bytes == 0)
    }

    /// A closed peer's items come out at once, in order, and its turns are gone; the others keep theirs.
    @Test func removingAPeerTakesItsItemsInOrder() {
        var queue = Queue()
        queue.append("read", for: "a", expensive: true, bytes: 4)
        queue.append("bye", for: "a", expensive: false, bytes: 1)
        queue.append("read", for: "b", expensive: true, bytes: 4)
        #expect(queue.removeAll(for: "a") == ["read", "bye"])
        #expect(queue.bytes == 4)
        #expect(!queue.isWaiting("a"))
        #expect(Self.drain(&queue) == [["b:read"]])
        #expect(queue.removeAll(for: "a").isEmpty)
    }
}
