import DequeModule

/// Queues of work per peer, served in turns (EventLoop+Requests.swift): each turn takes one peer's next item and
/// the cheap items queued right behind it, and a peer with more waiting goes to the back of the line. So a peer that
/// keeps many expensive reads in flight delays another peer by at most one expensive item per turn, and each
/// peer's items keep their order. Pure: the loop decides how many turns fit in its time slice.
struct FairQueue<Key: Hashable, Item> {
    private struct Entry {
        var item: Item
        var expensive: Bool
        var bytes: Int
    }

    private var queues: [Key: Deque<Entry>] = [:]
    private var order: Deque<Key> = []
    /// Peers that get no turns until released (a read of theirs is in flight): their items wait, in order.
    private var held = Set<Key>()
    /// What the queued items hold, as their owners counted it.
    private(set) var bytes = 0

    /// Whether anything waits for a turn (held peers' items do not).
    var isEmpty: Bool { order.isEmpty }

    /// Whether `key` has items waiting or is held (its next items must queue behind, to keep its order).
    func isWaiting(_ key: Key) -> Bool {
        (!queues.isEmpty && queues[key] != nil) || (!held.isEmpty && held.contains(key))
    }

    /// Holds `key`: no turns until ``release(_:)``, with `rest` (items of its last turn not done yet, each with
    /// whether it is expensive and its bytes) back at the head of its queue, in order.
    mutating func hold(_ key: Key, rest: [(item: Item, expensive: Bool, bytes: Int)] = []) {
        held.insert(key)
        order.removeAll { $0 == key }
        guard !rest.isEmpty else { return }
        var queue = queues.removeValue(forKey: key) ?? []
        for entry in rest.reversed() {
            queue.prepend(Entry(item: entry.item, expensive: entry.expensive, bytes: entry.bytes))
            bytes += entry.bytes
        }
        queues[key] = queue
    }

    /// Lets a held `key` take turns again, at the back of the line.
    mutating func release(_ key: Key) {
        guard held.remove(key) != nil, queues[key] != nil, !order.contains(key) else { return }
        order.append(key)
    }

    /// Queues an item of `key` behind its earlier ones.
    mutating func append(_ item: Item, for key: Key, expensive: Bool, bytes: Int) {
        if queues[key] == nil {
            queues[key] = []
            if held.isEmpty || !held.contains(key) { order.append(key) }
        }
        queues[key]!.append(Entry(item: item, expensive: expensive, bytes: bytes))
        self.bytes += bytes
    }

    /// The next turn: the first peer in line's next item and the cheap items right behind it, in order; the peer
    /// goes to the back of the line if more waits. `nil` when nothing waits.
    mutating func nextTurn() -> (key: Key, items: [Item])? {
        while let key = order.popFirst() {
            guard var queue = queues.removeValue(forKey: key) else { continue }
            var items: [Item] = []
            while let next = queue.first, items.isEmpty || !next.expensive {
                queue.removeFirst()
                bytes -= next.bytes
                items.append(next.item)
            }
            if !queue.isEmpty {
                queues[key] = queue
                order.append(key)
            }
            return (key, items)
        }
        return nil
    }

    /// Takes every item of `key` out of the queue, in order (its peer closed).
    mutating func removeAll(for key: Key) -> [Item] {
        held.remove(key)
        guard let queue = queues.removeValue(forKey: key) else { return [] }
        order.removeAll { $0 == key }
        for entry in queue { bytes -= entry.bytes }
        return queue.map(\.item)
    }
}
