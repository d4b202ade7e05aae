import DequeModule
import RollCallCore

/// Publications wait until the presence log holds what they show (docs/history.md, "Published once in the log"): a
/// subscriber never sees a transition that a `kill -9` could take from the log.
///
/// The machine's publishing effects pass through here, in order. An effect is carried out once the log's writer has
/// committed its transition (a record's own offset; a group message or a privacy change waits for every transition
/// made before it), and never before an earlier effect (one queue, so each topic keeps its order). Two ways out keep
/// presence moving when the disk does not: while the writer cannot write, nothing waits (the log then says so itself:
/// docs/history.md, "When the disk fails"), and an effect that has waited ``longestWait`` goes out anyway, counted.
/// Pure: the writer's progress and the loop's monotonic time come in as arguments.
struct PublicationHold {
    private struct Held {
        /// The offset the log must hold before the effect goes out.
        let needs: UInt64
        /// The offset of the record it publishes, if it publishes one of the log.
        let shows: UInt64?
        /// When it began to wait, on the loop's monotonic clock (milliseconds).
        let since: Int64
        let effect: BrokerMachine.Effect
    }

    private var held = Deque<Held>()
    /// The highest offset the log's writer had committed when last told (``UInt64/max`` while it cannot write).
    private(set) var logged: UInt64
    /// Effects let out by ``longestWait`` rather than by a commit, since the start.
    private(set) var releasedLate = 0
    /// When that was last said in the log: at most once a minute.
    private var lastWarning: Int64?

    /// The longest an effect waits for the log, in milliseconds of the loop's monotonic clock (not the broker's: test
    /// mode's clock jumps): a disk this slow delays presence no further.
    static let longestWait: Int64 = 1_000

    /// A hold over a log that holds everything through `logged`.
    init(logged: UInt64) {
        self.logged = logged
    }

    /// Whether effects wait for the log.
    var isHolding: Bool { !held.isEmpty }

    /// When the oldest waiting effect goes out whatever the log says, on the monotonic clock.
    var nextDeadline: Int64? { held.first.map { $0.since + Self.longestWait } }

    /// The highest offset whose transitions are all out, or in the log (of those up to `logOffset`, the latest handed
    /// out): reads of the log, resumes and `ping` go no further, so that nothing they show can be lost, and nothing
    /// a resumed subscriber is sent from the log reaches it again from this queue.
    func visible(logOffset: UInt64) -> UInt64 {
        var through = logOffset
        for item in held {
            if let shows = item.shows, shows <= through { through = shows - 1 }
        }
        return through
    }

    /// Whether an effect waits, or goes out at once: only publications wait, and only while the log lacks a
    /// transition made before them (`logOffset`, the latest handed out) or something waits ahead of them.
    static func waits(_ effect: BrokerMachine.Effect) -> Bool {
        switch effect {
        // `.answer` (a privacy edit's reply that waited for etcd, on a node of a cluster) never overtakes the views
        // it follows: a viewer is shown the change before its author hears `ok` (docs/privacy.md).
        case .publish, .publishGroup, .publishViews, .resendViews, .answer: true
        case .clusterWrite, .publishHeartbeat, .warning, .notice, .sessionSteps: false
        }
    }

    /// Moves `effects` to `out`, in order, but for those that must wait, which are kept; then the waiting effects that
    /// may go now (the log holds their transitions, `logged`, or they waited ``longestWait``), in order, ahead of them.
    /// `logOffset` is the latest offset handed out.
    mutating func pass(
        _ effects: inout [BrokerMachine.Effect], to out: inout [BrokerMachine.Effect], logged: UInt64,
        logOffset: UInt64, now: Int64
    ) {
        self.logged = logged
        release(into: &out, now: now)
        for effect in effects {
            guard Self.waits(effect) else {
                out.append(effect)
                continue
            }
            let shows: UInt64? =
                switch effect {
                case .publish(let record), .publishViews(let record): record.offset
                default: nil
                }
            let needs = shows ?? logOffset
            if held.isEmpty, needs <= logged {
                out.append(effect)
            } else {
                held.append(Held(needs: needs, shows: shows, since: now, effect: effect))
            }
        }
        effects.removeAll(keepingCapacity: true)
    }

    /// Everything that waits, in order: the broker stops, and its last write is done.
    mutating func releaseAll(into out: inout [BrokerMachine.Effect]) {
        while let item = held.popFirst() { out.append(item.effect) }
    }

    private mutating func release(into out: inout [BrokerMachine.Effect], now: Int64) {
        let lateBefore = releasedLate
        while let first = held.first {
            let late = first.needs > logged
            guard !late || first.since + Self.longestWait <= now else { break }
            if late { releasedLate += 1 }
            out.append(held.removeFirst().effect)
        }
        if releasedLate > lateBefore, lastWarning.map({ now - $0 >= 60_000 }) ?? true {
            lastWarning = now
            out.append(
                .warning(
                    "publications waited \(Self.longestWait) ms for the presence log's commit and went out before it",
                    ["published_late": "\(releasedLate)", "log_committed": "\(logged)"]))
        }
    }
}
