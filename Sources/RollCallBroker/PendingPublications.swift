import DequeModule
import RollCallCore
import RollCallWire

/// Updates that wait for full subscribers, oldest first, and what the broker knows about their stall.
///
/// The XPUB runs with `ZMQ_XPUB_NODROP`: a send fails, instead of dropping, while a subscriber that the message
/// matches is at its high-water mark. The loop then keeps the message here, in order, and retries every millisecond.
/// A subscriber that keeps up is never skipped. One that holds the head back for `--update-stall-ms` is skipped
/// from then on (the broker is *lossy*) until no subscriber has been full for that long again; every message a full
/// subscriber missed is counted in ``dropped``, which the heartbeat carries.
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
    }

    private(set) var entries: Deque<Entry> = []
    private(set) var bytes = 0
    /// When the entry now at the head was first refused.
    var blockedSince: BrokerTime?
    /// When a send was last refused because a subscriber was full.
    var lastFull: BrokerTime?
    /// Whether full subscribers are skipped (after a stall) rather than waited for.
    var lossy = false
    /// Messages sent while a subscriber they matched was full: that subscriber missed them.
    var dropped: UInt64 = 0

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
        blockedSince = nil
    }
}
