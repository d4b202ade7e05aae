import Foundation
import RollCallClient

/// One fault of a cluster fault run, planned from the seed before the run starts, so that a seed replays it.
struct PlannedFault: Sendable, CustomStringConvertible {
    /// Which etcd member a pause stops: the leader at the moment of the fault, or a member by index.
    enum EtcdTarget: Sendable, CustomStringConvertible {
        case leader
        case member(Int)

        var description: String {
            switch self {
            case .leader: "the leader"
            case .member(let index): "member m\(index)"
            }
        }
    }

    enum Kind: Sendable {
        /// `kill -9` of node `node`, started again under the same node id `downMs` later.
        case killNode(node: Int, downMs: Int)
        /// SIGSTOP of an etcd member, SIGCONT `forMs` later.
        case pauseEtcd(EtcdTarget, forMs: Int)
        /// Every TCP path between node `node` and etcd cut, restored `forMs` later.
        case partitionNode(node: Int, forMs: Int)
    }

    /// When the fault starts, in milliseconds from the start of the workload.
    let atMs: Int
    let kind: Kind

    var description: String {
        let at = String(format: "t=%6.2f s", Double(atMs) / 1_000)
        switch kind {
        case .killNode(let node, let down):
            return "\(at): kill -9 node \(FaultSchedule.nodeNames[node]), restart it after \(down) ms"
        case .pauseEtcd(let target, let length):
            return "\(at): SIGSTOP etcd \(target), SIGCONT after \(length) ms"
        case .partitionNode(let node, let length):
            return "\(at): partition node \(FaultSchedule.nodeNames[node]) from etcd for \(length) ms"
        }
    }
}

/// The faults of one run, drawn from a seed: one fault at a time (so never more than one etcd member or one node
/// down), each healed and followed by a quiet gap before the next.
struct FaultSchedule: Sendable, CustomStringConvertible {
    static let nodeNames = ["a", "b", "c"]

    let seed: UInt64
    let durationMs: Int
    let faults: [PlannedFault]

    /// Draws faults until `durationMs` is used up. A kill leaves room for the dead node's lease plus 1 s before the
    /// next fault (the window in which its sessions must end); a partition lasts up to twice the lease, so that some
    /// outlive it (the node's sessions end as `node_lost`, the node joins again under a new lease) and some do not.
    init(seed: UInt64, durationMs: Int, leaseMs: Int) {
        self.seed = seed
        self.durationMs = durationMs
        var random = SplitMix64(seed: seed)
        var faults: [PlannedFault] = []
        var at = 1_500  // the clients' sessions are open and subscribers in place before the first fault
        while true {
            let kind: PlannedFault.Kind
            let length: Int
            switch Int.random(in: 0..<3, using: &random) {
            case 0:
                let down = Int.random(in: 300...3_000, using: &random)
                kind = .killNode(node: Int.random(in: 0..<3, using: &random), downMs: down)
                length = max(down + 1_500, leaseMs + 1_500)
            case 1:
                let target: PlannedFault.EtcdTarget =
                    Bool.random(using: &random) ? .leader : .member(Int.random(in: 0..<3, using: &random))
                let pause = Int.random(in: 500...4_000, using: &random)
                kind = .pauseEtcd(target, forMs: pause)
                length = pause + 1_000
            default:
                let cut = Int.random(in: 500...(2 * leaseMs), using: &random)
                kind = .partitionNode(node: Int.random(in: 0..<3, using: &random), forMs: cut)
                length = cut + 1_000
            }
            guard faults.isEmpty || at + length <= durationMs else { break }
            faults.append(PlannedFault(atMs: at, kind: kind))
            at += length + Int.random(in: 1_000...2_500, using: &random)
        }
        self.faults = faults
    }

    var description: String {
        (["seed \(seed) (ROLLCALL_FAULT_SEED=\(seed) ROLLCALL_FAULT_SECONDS=\(durationMs / 1_000) to replay)"]
            + faults.map { "  \($0)" }).joined(separator: "\n")
    }

    /// The seed from `ROLLCALL_FAULT_SEED` (decimal, or hexadecimal after `0x`), else a random one.
    static func seedFromEnvironment() -> UInt64 {
        let given = ProcessInfo.processInfo.environment["ROLLCALL_FAULT_SEED"] ?? ""
        if given.hasPrefix("0x"), let seed = UInt64(given.dropFirst(2), radix: 16) { return seed }
        return UInt64(given) ?? UInt64.random(in: 0...UInt64.max)
    }

    /// The run's length from `ROLLCALL_FAULT_SECONDS`, 30 s by default.
    static func durationFromEnvironment() -> Int {
        let given = ProcessInfo.processInfo.environment["ROLLCALL_FAULT_SECONDS"] ?? ""
        return (Int(given) ?? 30) * 1_000
    }
}
