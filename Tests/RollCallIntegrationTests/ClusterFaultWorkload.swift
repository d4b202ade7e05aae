import Foundation
import RollCallClient
import RollCallCore
import RollCallTestSupport
import RollCallWire

/// Three `rollcall serve` nodes on a three-member etcd, each node reaching every member through its own TCP relay
/// (so that a test can cut a node off from etcd), with nodes killed and started again under the same node id.
final class FaultCluster: @unchecked Sendable {
    let etcd: EtcdCluster
    let leaseMs: Int
    /// `relays[node][member]`: node `node`'s path to etcd member `member`.
    let relays: [[TCPRelay]]
    private let lock = NSLock()
    private var processes: [BrokerProcess]
    private var generations = [0, 0, 0]

    init(leaseMs: Int) throws {
        let etcd = try EtcdCluster(members: 3)
        self.etcd = etcd
        self.leaseMs = leaseMs
        relays = try (0..<3).map { _ in try etcd.members.map { try TCPRelay(to: $0.clientPort) } }
        processes = []
        do {
            for node in 0..<3 { processes.append(try start(node)) }
            for node in 0..<3 { try waitUntilLive(node) }
        } catch {
            shutdown()
            throw error
        }
    }

    deinit { shutdown() }

    func shutdown() {
        let running = lock.withLock { processes }
        for process in running { process.stop() }
        etcd.shutdown()
    }

    private func start(_ node: Int) throws -> BrokerProcess {
        let url = "etcd://" + relays[node].map { "127.0.0.1:\($0.port)" }.joined(separator: ",")
        return try BrokerProcess(
            executable: ChildProcess.rollcall,
            arguments: [
                "--cluster", url, "--node-id", FaultSchedule.nodeNames[node], "--node-lease-ms", "\(leaseMs)",
            ])
    }

    /// Node `node`'s endpoints and the run of its process they belong to (those of a killed process until it is
    /// started again: clients find it dead as a real client would).
    func endpoints(_ node: Int) -> (command: String, update: String, generation: Int) {
        lock.withLock { (processes[node].command, processes[node].update, generations[node]) }
    }

    /// Kills node `node` with SIGKILL; returns the run that was killed.
    func kill(_ node: Int) -> Int {
        let (process, generation) = lock.withLock { (processes[node], generations[node]) }
        process.kill()
        return generation
    }

    /// Starts node `node` again under the same node id (a new process on new ports, a new incarnation).
    func restart(_ node: Int) throws {
        let process = try start(node)
        lock.withLock {
            processes[node] = process
            generations[node] += 1
        }
    }

    func cut(_ node: Int) { relays[node].forEach { $0.cut() } }
    func restore(_ node: Int) { relays[node].forEach { $0.restore() } }

    /// Waits until node `node` says, in `ping`, that it is live.
    func waitUntilLive(_ node: Int, timeout: Duration = .seconds(15)) throws {
        let client = try CommandClient(endpoint: endpoints(node).command, timeoutMilliseconds: 500)
        let deadline = ContinuousClock.now + timeout
        var last: ClusterStanding?
        while ContinuousClock.now < deadline {
            last = (try? client.ping())?.cluster
            if last?.state == .live { return }
            pause(milliseconds: 20)
        }
        throw TestFailure("node \(node) not live within \(timeout); last: \(String(describing: last))")
    }
}

/// What a cluster fault run records as it goes, from the clients' threads, the subscribers' thread and the
/// fault thread.
final class FaultRecorder: @unchecked Sendable {
    let start = ContinuousClock.now
    private let lock = NSLock()
    private var recording: FaultRecording
    private var clientsRun = true
    private var subscribersRun = true
    private(set) var log: [String] = []

    init(leaseMs: Int, ttlMs: Int) { recording = FaultRecording(leaseMs: leaseMs, ttlMs: ttlMs) }

    /// Milliseconds since the run began.
    var nowMs: Int {
        let elapsed = ContinuousClock.now - start
        return Int(elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
    }

    /// Whether the clients go on changing statuses.
    var clientsRunning: Bool { lock.withLock { clientsRun } }
    func stopClients() { lock.withLock { clientsRun = false } }
    /// Whether the subscribers go on reading.
    var subscribersRunning: Bool { lock.withLock { subscribersRun } }
    func stopSubscribers() { lock.withLock { subscribersRun = false } }
    var snapshot: FaultRecording { lock.withLock { recording } }

    func add(_ request: FaultRecording.Request) { lock.withLock { recording.requests.append(request) } }
    func add(_ arrival: FaultRecording.Arrival) { lock.withLock { recording.arrivals.append(arrival) } }
    func add(_ kill: FaultRecording.Kill) { lock.withLock { recording.kills.append(kill) } }

    /// Notes what the fault thread did, with the time.
    func note(_ line: String) {
        let at = String(format: "t=%6.2f s", Double(nowMs) / 1_000)
        lock.withLock { log.append("\(at): \(line)") }
    }
}

/// One user's client: a session on one node at a time, a change of status and text every few hundred ms, and a
/// move to another node when its node is refused (`cluster_unavailable`: a `bye` first, which a cut-off node
/// still takes), gone (no reply) or has forgotten the session (`unknown_session`).
struct FaultClient {
    static let ttlMs = 4_000
    static let timeoutMs = 600

    let user: UserID
    let cluster: FaultCluster
    let recorder: FaultRecorder
    var random: SplitMix64
    var number = 0
    var node: Int
    var current: (generation: Int, client: CommandClient, session: SessionID)?
    /// Whether the last hello or status was answered `ok`.
    var acknowledged = false

    /// The session the client holds at the end, for the final change.
    var held: (node: Int, generation: Int, session: SessionID)? {
        current.map { (node, $0.generation, $0.session) }
    }

    init(user: UserID, index: Int, seed: UInt64, cluster: FaultCluster, recorder: FaultRecorder) {
        self.user = user
        self.cluster = cluster
        self.recorder = recorder
        random = SplitMix64(seed: seed &+ UInt64(index + 1) &* 0x9E37_79B9_7F4A_7C15)
        node = index % 3
    }

    /// Changes status until the recorder stops; the pace is the workload, not a decision.
    mutating func run() {
        while recorder.clientsRunning {
            pause(milliseconds: Int.random(in: 150...450, using: &random))
            let status = [Status.online, .busy, .away].randomElement(using: &random)!
            step(status)
        }
    }

    /// One change: a status on the session held, or a hello on the node chosen.
    mutating func step(_ status: Status) {
        number += 1
        let text = "n\(number)"
        if let held = current {
            let outcome = call(held.client) { try $0.setStatus(held.session, status, text: text) }
            record(.status, held.generation, held.session, status, text, outcome)
            acknowledged = outcome.1 == .ok
            guard outcome.1 != .ok else { return }
            if outcome.1 == .rejected(.clusterUnavailable) {
                let bye = call(held.client) { try $0.bye(held.session) }
                record(.bye, held.generation, held.session, status, nil, bye)
            }
            current = nil
            node = (node + 1) % 3
            return
        }
        let (command, _, generation) = cluster.endpoints(node)
        guard let client = try? CommandClient(endpoint: command, timeoutMilliseconds: Self.timeoutMs) else {
            acknowledged = false
            return
        }
        var granted: SessionID?
        let outcome = call(client) {
            granted =
                try $0.hello(
                    PresenceCore.Hello(
                        user: user, device: "fault", status: status, text: text,
                        ttlMilliseconds: Int64(Self.ttlMs))
                ).session
        }
        record(.hello, generation, granted, status, text, outcome)
        acknowledged = outcome.1 == .ok
        if let granted, outcome.1 == .ok {
            current = (generation, client, granted)
        } else {
            node = (node + 1) % 3
        }
    }

    /// Makes a call; returns when it was sent and how it ended.
    func call(_ client: CommandClient, _ body: (CommandClient) throws -> Void) -> (
        Int, FaultRecording.Request.Outcome
    ) {
        let sent = recorder.nowMs
        do {
            try body(client)
            return (sent, .ok)
        } catch ClientError.rejected(let error) {
            return (sent, .rejected(error.code))
        } catch ClientError.timedOut {
            return (sent, .timedOut)
        } catch {
            return (sent, .failed("\(error)"))
        }
    }

    func record(
        _ kind: FaultRecording.Request.Kind, _ generation: Int, _ session: SessionID?, _ status: Status,
        _ text: String?, _ outcome: (Int, FaultRecording.Request.Outcome)
    ) {
        recorder.add(
            FaultRecording.Request(
                user: user, node: node, generation: generation, kind: kind, session: session, status: status,
                text: text, sentMs: outcome.0, repliedMs: recorder.nowMs, outcome: outcome.1))
    }
}

extension FaultClient {
    /// One last change, `online`, made on the session held (or a new one) and acknowledged; returns its text.
    mutating func finalChange() -> String? {
        for _ in 0..<6 {
            step(.online)
            if current != nil && acknowledged { return "n\(number)" }
        }
        return nil
    }
}

/// The clients, handed from their threads to the test's when they stop.
final class FaultClients: @unchecked Sendable {
    private let lock = NSLock()
    private var clients: [Int: FaultClient] = [:]
    func set(_ index: Int, _ client: FaultClient) { lock.withLock { clients[index] = client } }
    func take(_ index: Int) -> FaultClient? { lock.withLock { clients.removeValue(forKey: index) } }
}
