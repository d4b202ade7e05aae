import DequeModule
import RollCallCore
import RollCallWire

/// Updates that wait for full subscribers, oldest first.
///
/// The XPUB runs with `ZMQ_XPUB_NODROP`: a send fails, instead of dropping, while a subscriber that the message
/// matches is at its high-water mark. The loop then keeps the message here, in order, and retries every millisecond,
/// so a subscriber that keeps up is never skipped. A message that has waited `--update-stall-ms` is sent past the
/// full subscribers (they miss it, and ``dropped`` counts it). libzmq then leaves a subscriber that missed a message
/// out of every later send until it has read part of its queue, so a stalled subscriber holds the others back once,
/// not for every message; a slow one, each time it has read enough to be sent to again and fills up again.
struct PendingPublications {
    /// A message's body; the heartbeat's is written when it leaves, so that its `dropped` covers everything sent
    /// before it.
    enum Body {
        case bytes([UInt8])
        case heartbeat
    }

    struct Entry {
        var topic: [UInt8]
        var body: Body
        /// What the entry holds, as counted against `--update-queue-bytes`.
        var size: Int
        /// When it was queued.
        var queuedAt: BrokerTime
    }

    private(set) var entries: Deque<Entry> = []
    private(set) var bytes = 0
    /// Messages sent past full subscribers: each made at least one subscriber miss it, and maybe later ones.
    var dropped: UInt64 = 0
    /// When a stall was last logged, to log one a few times a minute at most.
    var lastWarning: BrokerTime?

    var isEmpty: Bool { entries.isEmpty }
    var head: Entry? { entries.first }

    /// The bytes an entry is counted for: its frames and libzmq's message overhead.
    static func size(topic: [UInt8], body: Body) -> Int {
        switch body {
        case .bytes(let bytes): topic.count + bytes.count + 128
        case .heartbeat: topic.count + 256
        }
    }

    mutating func append(_ entry: Entry) {
        entries.append(entry)
        bytes += entry.size
    }

    mutating func removeHead() {
        let entry = entries.removeFirst()
        bytes -= entry.size
    }
}
