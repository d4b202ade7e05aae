import Foundation
import Synchronization

/// One node's part in the cluster, at run time: a worker thread that drives ``NodeMembership`` with a real
/// ``EtcdClient`` (lease, registration, snapshot, keep-alives, the node's writes) and a watch that feeds
/// ``ClusterReplica``. Whoever owns it (the broker's event loop) hands it writes and gets back, through `notify` on
/// the worker's thread, the node's state and the cluster's changes, its own writes included, in etcd's order.
///
/// Nothing here blocks the caller: ``write(_:)`` queues and returns. The owner must not treat its own writes as
/// done until they come back as changes; that is what makes every node compute the same records.
public final class ClusterNode: Sendable {
    public struct Configuration: Sendable {
        public var endpoints: [EtcdEndpoint]
        /// This node's name in the cluster. Range: ``ClusterKeys/isValidNodeID(_:)``.
        public var nodeID: String
        public var membership: NodeMembership.Configuration
        public var keys: ClusterKeys
        /// How long one etcd call may take on one member. Range: 100 ms and more; under a third of the lease.
        public var requestTimeout: Duration
        /// What the node says about itself in its incarnation key (JSON, for operators reading etcd).
        public var description: String
        /// Called on the worker's thread before a rejoin writes the node's sessions again, so that what the owner's
        /// clients sent while the node was cut off or stopped (a `bye` waiting in a socket) is among the queued writes
        /// first, and an ended session does not come back with the node. The broker returns once its loop has run a
        /// round of requests after the call, or after half a second. `nil`: no wait.
        public var beforeRejoin: (@Sendable () -> Void)?

        public init(
            endpoints: [EtcdEndpoint], nodeID: String, leaseMs: Int64 = 5_000, keys: ClusterKeys = ClusterKeys(),
            requestTimeout: Duration = .milliseconds(500), description: String = "{}"
        ) {
            self.endpoints = endpoints
            self.nodeID = nodeID
            self.membership = NodeMembership.Configuration(leaseMs: leaseMs)
            self.keys = keys
            self.requestTimeout = requestTimeout
            self.description = description
        }
    }

    /// A write the owner asks for; each is one etcd transaction.
    public enum Write: Sendable, Equatable {
        /// Creates or changes one of this node's sessions (under its lease), with the user's record if given.
        case putSession(id: String, value: String, user: (id: String, record: String)?)
        /// Ends one of this node's sessions, with the user's record if given.
        case endSession(id: String, user: (id: String, record: String)?)
        case putUser(id: String, record: String)
        case putGroup(id: String, definition: String)
        case deleteGroup(id: String)
        /// One of a user's privacy choices, whole (``ClusterKeys/Entry/privacy(_:)``).
        case putPrivacy(ClusterKeys.PrivacyKey, value: String)
        /// Stamps the end of a lost incarnation's sessions with `ending` (the user's-key JSON, `node_lost` and a time)
        /// unless a node stamped it before: a transaction of its own that succeeds only if the key
        /// ``ClusterKeys/Entry/lost(_:)`` does not exist, so the first writer wins and every node, this one included,
        /// reads the winner's stamp back through the watch. Put under this node's lease (it goes when the node goes).
        /// Sent before the writes queued earlier: it touches no key of theirs, and every node holds its records until
        /// a stamp comes.
        case stampLoss(ClusterKeys.Incarnation, ending: String)
        /// Session `id`'s client was refused (the node could not vouch for the cluster) and moved on: if the node
        /// joins again under a new lease while this waits in the queue, the join does not write the session again.
        /// Nothing is written to etcd; gone through the queue (the lease lived), it changes nothing.
        case abandonIfRejoined(id: String)

        public static func == (lhs: Write, rhs: Write) -> Bool { "\(lhs)" == "\(rhs)" }
    }

    /// What the node reports to its owner, on the worker's thread, in order.
    public enum Notification: Sendable, Equatable {
        case state(NodeMembership.State)
        /// Changes of the cluster, in etcd's order, each with its revision.
        case changes([ClusterReplica.Change])
        /// Changes of etcd's history that a join replays (``Worker/replay(to:)``), in order, before the node reports
        /// `live`: the owner applies them as it would ``changes(_:)``, and may publish only each user's last record
        /// of them (history its subscribers need not see again).
        case replayed([ClusterReplica.Change])
        /// The node read a snapshot of etcd at this revision rather than its history (a join whose history is
        /// compacted or too long, or a compacted watch): `changes` are the snapshot's differences from what the node
        /// had, all at that revision, and whatever happened in between is not among them.
        case snapshot(revision: Int64, changes: [ClusterReplica.Change])
        /// A write failed and was dropped (etcd refused it, or the node stopped).
        case writeFailed(Write, String)
    }

    private struct Shared {
        var writes: [Write] = []
        var watchUpdates: [EtcdWatch.Update] = []
        var stopping = false
        /// Stopping without revoking the lease.
        var abandoning = false
        var state: NodeMembership.State = .joining(attempt: 0)
        var window = NodeMembership.Window(servingUntilMs: nil)
        var seqBase: UInt64?
        var incarnation: ClusterKeys.Incarnation?
    }

    public let configuration: Configuration
    private let shared = Mutex(Shared())
    private let work = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private let notify: @Sendable (Notification) -> Void
    private let started = Atomic<Bool>(false)
    private let joined = Atomic<Bool>(false)

    public init(configuration: Configuration, notify: @escaping @Sendable (Notification) -> Void) {
        precondition(ClusterKeys.isValidNodeID(configuration.nodeID), "invalid node id \(configuration.nodeID)")
        self.configuration = configuration
        self.notify = notify
    }

    /// Starts the worker: the node joins as soon as etcd answers.
    public func start() {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let thread = Thread { [self] in
            var worker = Worker(node: self)
            worker.run()
        }
        thread.name = "rollcall-cluster"
        thread.start()
    }

    /// The node's state now.
    public var state: NodeMembership.State { shared.withLock { $0.state } }

    /// Whether the node may serve requests now (new sessions, changes on its sessions, reads): it is live and the
    /// last renewal etcd answered was sent less than ``NodeMembership/Configuration/cutOffAfterMs`` ago
    /// (``NodeMembership/Window``, decided there). Asked of the clock now, so it turns false on time even while
    /// the worker is stuck in a call that etcd does not answer. Safe from any thread.
    public var acceptsSessions: Bool {
        shared.withLock { $0.window }.accepts(nowMs: nowMs)
    }

    private let origin = ContinuousClock.now

    /// Milliseconds since the node was made, on the monotonic clock.
    var nowMs: Int64 {
        let elapsed = ContinuousClock.now - origin
        return elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000
    }

    /// The cluster's `seq` base, once the node has joined (see ``ClusterReplica/seq(at:)``).
    public var seqBase: UInt64? { shared.withLock { $0.seqBase } }

    /// The node's current incarnation, once it has joined.
    public var incarnation: ClusterKeys.Incarnation? { shared.withLock { $0.incarnation } }

    /// Queues a write; returns at once. Its effect comes back as changes through `notify`.
    public func write(_ write: Write) {
        shared.withLock { shared in
            if case .stampLoss = write {
                let first = shared.writes.firstIndex { if case .stampLoss = $0 { false } else { true } }
                shared.writes.insert(write, at: first ?? shared.writes.endIndex)
            } else {
                shared.writes.append(write)
            }
        }
        work.signal()
    }

    /// Stops: ends this node's sessions everywhere at once (revokes its lease, if etcd answers), stops the watch and
    /// the worker, and returns when that is done.
    public func stop() {
        shared.withLock { $0.stopping = true }
        waitForTheWorker()
    }

    /// Stops the worker without revoking the lease: for tests, as a node's death looks to the rest (its lease runs
    /// out).
    public func abandon() {
        shared.withLock {
            $0.stopping = true
            $0.abandoning = true
        }
        waitForTheWorker()
    }

    /// Wakes the worker and waits for it to end; once only, whoever asks first (later calls return at once).
    private func waitForTheWorker() {
        work.signal()
        guard started.load(ordering: .acquiring), !joined.exchange(true, ordering: .acquiringAndReleasing) else {
            return
        }
        done.wait()
    }

    // MARK: - The worker

    /// Everything the worker thread owns.
    private struct Worker {
        let node: ClusterNode
        let client: EtcdClient
        var membership: NodeMembership
        var replica: ClusterReplica
        var watch: EtcdWatch?
        var lease: Int64 = 0
        /// The revision at which the node last wrote its own key, which its writes compare with (``perform(_:)``).
        var fence: Int64 = 0
        /// The node's live sessions, by id: written again under a new lease when the node joins again.
        var localSessions: [String: String] = [:]
        var keepAliveFailed = false
        /// Whether this process has joined once (the revocation of earlier runs is done then only).
        var hasJoined = false
        /// Leases whose join failed: a copy of that join may still be carried out late, by a member that had not
        /// answered in time, and show the node's sessions a second time under a lease nobody renews. Each is revoked
        /// once a later join has gone through (etcd answers again then), so that such a copy finds no lease; one etcd
        /// did not answer for then is tried again after each answered renewal.
        var abandonedLeases: [Int64] = []

        init(node: ClusterNode) {
            self.node = node
            client = EtcdClient(
                endpoints: node.configuration.endpoints, requestTimeout: node.configuration.requestTimeout)
            membership = NodeMembership(configuration: node.configuration.membership)
            replica = ClusterReplica(keys: node.configuration.keys)
        }

        var nowMs: Int64 { node.nowMs }

        var keys: ClusterKeys { node.configuration.keys }

        mutating func run() {
            defer {
                // The watch is cancelled by then: close the client's connections before ``stop()`` returns.
                client.shutdown()
                node.done.signal()
            }
            perform(membership.handle(.start(nowMs: nowMs)))
            while true {
                _ = node.work.wait(timeout: .now() + .milliseconds(20))
                let (writes, updates, stopping, abandon) = node.shared.withLock { shared in
                    defer {
                        shared.watchUpdates = []
                        if shared.state.isLive { shared.writes = [] }
                    }
                    return (
                        shared.state.isLive ? shared.writes : [], shared.watchUpdates, shared.stopping,
                        shared.abandoning
                    )
                }
                for update in updates { handle(update) }
                if stopping {
                    watch?.cancel()
                    if !abandon { perform(membership.handle(.stop)) }
                    for write in node.shared.withLock({ $0.writes }) {
                        node.notify(.writeFailed(write, "the node stopped"))
                    }
                    return
                }
                var next = writes.startIndex
                while next < writes.endIndex {
                    let batch = nextBatch(writes[next...])
                    let sent = nowMs
                    let outcome = perform(batch)
                    guard outcome == .written else {
                        // etcd cannot answer now, or the lease is gone: keep this batch and the later writes, in
                        // order, for the next turn.
                        let rest = writes[next...]
                        node.shared.withLock { $0.writes.insert(contentsOf: rest, at: 0) }
                        if outcome == .leaseGone {
                            // Join again, with the writes back in the queue first: the join writes the node's live
                            // sessions as these writes leave them (a session they end is not written again), and
                            // they go to etcd under the new lease once it is live.
                            perform(membership.handle(.keepAliveAnswered(leaseAlive: false, nowMs: sent)))
                        }
                        break
                    }
                    next += batch.count
                    // A long queue must not hold up the lease's renewal: it is due whatever is queued.
                    perform(membership.handle(.tick(nowMs: nowMs)))
                }
                perform(membership.handle(.tick(nowMs: nowMs)))
            }
        }

        // MARK: Membership actions

        mutating func perform(_ actions: [NodeMembership.Action]) {
            let window = membership.window
            node.shared.withLock { $0.window = window }
            for action in actions { perform(action) }
        }

        mutating func perform(_ action: NodeMembership.Action) {
            let sent = nowMs
            switch action {
            case .grantLease:
                do {
                    let granted = try client.grant(ttlSeconds: node.configuration.membership.leaseSeconds)
                    perform(membership.handle(.leaseGranted(granted.id, nowMs: sent)))
                } catch {
                    perform(membership.handle(.callFailed(nowMs: sent)))
                }
            case .register(let lease):
                do {
                    let registered = try register(lease: lease)
                    let revision = try resync(replayingTo: registered)
                    perform(membership.handle(.snapshotLoaded(revision: revision, nowMs: sent)))
                    // Only at this process's first join: a rejoin revoking "previous" incarnations would revoke a
                    // live process that shares the node id, which would revoke back, for ever.
                    if !hasJoined { revokePreviousIncarnations() }
                    hasJoined = true
                    revokeAbandonedLeases()
                } catch {
                    abandonedLeases.append(lease)
                    perform(membership.handle(.callFailed(nowMs: sent)))
                }
            case .keepAlive(let lease):
                keepAliveFailed = true
                do {
                    try client.keepAlive(lease: lease)
                    keepAliveFailed = false
                    perform(membership.handle(.keepAliveAnswered(leaseAlive: true, nowMs: sent)))
                    // A revocation etcd did not answer after the join is tried again while etcd answers.
                    if !abandonedLeases.isEmpty { revokeAbandonedLeases() }
                } catch EtcdError.leaseNotFound {
                    perform(membership.handle(.keepAliveAnswered(leaseAlive: false, nowMs: sent)))
                } catch {
                    perform(membership.handle(.callFailed(nowMs: sent)))
                }
            case .probe(let lease):
                guard membership.state.isLive, !keepAliveFailed else { return }
                let incarnation = ClusterKeys.Incarnation(node: node.configuration.nodeID, lease: lease)
                if let revision = try? client.put(
                    keys.key(.node(incarnation)), node.configuration.description, lease: lease)
                {
                    fence = revision
                    perform(membership.handle(.wrote(revision: revision, nowMs: sent)))
                }
            case .restartWatch:
                watch?.reconnect()
            case .resync:
                do {
                    _ = try resync()
                } catch {
                    perform(membership.handle(.callFailed(nowMs: sent)))
                }
            case .report(let state):
                node.shared.withLock { $0.state = state }
                node.notify(.state(state))
            case .revoke(let lease):
                try? client.revoke(lease: lease)
            }
        }

        /// Writes the cluster's seq base if no node wrote it before, then the incarnation's key and the node's live
        /// sessions under `lease`, in one transaction fenced by the key's absence; returns that transaction's revision.
        mutating func register(lease: Int64) throws -> Int64 {
            if hasJoined { node.configuration.beforeRejoin?() }
            // Writes queued while the node was not live come first: a session they end is not written again (it
            // would come back online under the new lease), nor one whose client was refused and moved on; one they
            // change is written as it is now.
            for write in node.shared.withLock({ $0.writes }) {
                noteLocal(write)
                if case .abandonIfRejoined(let id) = write { localSessions[id] = nil }
            }
            let incarnation = ClusterKeys.Incarnation(node: node.configuration.nodeID, lease: lease)
            var operations: [EtcdOperation] = [
                .put(key: keys.key(.node(incarnation)), value: node.configuration.description, lease: lease)
            ]
            for (id, value) in localSessions.sorted(by: { $0.key < $1.key }) {
                let session = ClusterKeys.SessionKey(incarnation: incarnation, id: id)
                operations.append(.put(key: keys.key(.session(session)), value: value, lease: lease))
            }
            // The first node to join writes the cluster's seq base; the others leave it as it is.
            let base = String(UInt64(max(0, Date().timeIntervalSince1970 * 1_000)) * 1_000)
            let cluster = keys.key(.cluster)
            _ = try client.txn(compare: [.absent(cluster)], success: [.put(key: cluster, value: base, lease: 0)])
            // Only while the incarnation's key does not exist: a copy of this transaction that a member carries out
            // late (the client gave up on it and sent it to the next member, which took it) then changes nothing. It
            // would write again, under the live lease, sessions that ended since, shown online until the node dies.
            let key = keys.key(.node(incarnation))
            let written = try client.txn(compare: [.absent(key)], success: operations)
            var revision = written.revision
            if !written.succeeded {
                // The key exists: a copy of this very transaction went first and its answer was lost (the lease is
                // new, and no one else writes under it). It wrote the same keys; the join is at its revision.
                guard let found = try client.range(key).kvs.first else { throw EtcdError.leaseNotFound(lease) }
                revision = found.modRevision
            }
            self.lease = lease
            fence = revision
            node.shared.withLock { $0.incarnation = incarnation }
            return revision
        }

        /// Brings the copy up to date and watches from there on; returns the revision it is at. A join
        /// (`replayingTo` its own transaction's revision) replays etcd's history from where the copy is, as a node
        /// that watched all along saw it, if etcd still has it and it is short enough (``replay(to:)``); otherwise,
        /// and after a compaction, the copy reads a snapshot, hands the differences to the owner, and starts a new
        /// watch just after it.
        mutating func resync(replayingTo target: Int64? = nil) throws -> Int64 {
            watch?.cancel()
            watch = nil
            if let target, replay(to: target) { return replica.revision }
            let snapshot = try client.snapshot(prefix: keys.prefix)
            let changes = replica.load(snapshot: snapshot.kvs, revision: snapshot.revision)
            let base = replica.seqBase
            node.shared.withLock { $0.seqBase = base }
            node.notify(.snapshot(revision: snapshot.revision, changes: changes))
            let target = node
            watch = client.watch(prefix: keys.prefix, from: snapshot.revision + 1) { update in
                target.shared.withLock { $0.watchUpdates.append(update) }
                target.work.signal()
            }
            return snapshot.revision
        }

        /// The most revisions a join replays rather than reading a snapshot.
        static let maxReplayRevisions: Int64 = 50_000

        /// Replays etcd's history from the copy's revision to `target` through a watch that stays on afterwards: the
        /// node then publishes every record as the nodes that watched all along did, byte for byte, `seq`, `since`
        /// and `last_seen` included, whether it starts late or joins again after a cut-off (a snapshot knows the keys,
        /// not when each user's record last changed: docs/cluster.md, weakness 10). Gives up, cancelling the watch,
        /// if that history is longer than ``maxReplayRevisions``, compacted, or not through within half the lease
        /// (nothing renews the lease while the worker replays: its first renewal, due a third of the lease after the
        /// grant, then goes at once, with half the lease to spare): the caller then reads a snapshot, and the changes
        /// replayed so far are simply its starting point.
        mutating func replay(to target: Int64) -> Bool {
            let from = replica.revision
            guard target - from <= Self.maxReplayRevisions else { return false }
            // A read at the first revision to replay fails if etcd compacted it.
            guard (try? client.range(keys.key(.cluster), revision: from + 1)) != nil else { return false }
            let owner = node
            watch = client.watch(prefix: keys.prefix, from: from + 1) { update in
                owner.shared.withLock { $0.watchUpdates.append(update) }
                owner.work.signal()
            }
            let deadline = ContinuousClock.now + .milliseconds(node.configuration.membership.leaseMs / 2)
            var compacted = false
            while replica.revision < target, !compacted, ContinuousClock.now < deadline {
                _ = node.work.wait(timeout: .now() + .milliseconds(5))
                let updates = node.shared.withLock { shared in
                    defer { shared.watchUpdates = [] }
                    return shared.watchUpdates
                }
                for update in updates {
                    switch update {
                    case .events(let events):
                        let changes = replica.apply(events)
                        // The base comes with the cluster's first join, before any change that needs it.
                        if let base = replica.seqBase { node.shared.withLock { $0.seqBase = base } }
                        if !changes.isEmpty { node.notify(.replayed(changes)) }
                    case .compacted:
                        compacted = true
                    case .progress, .connected, .disconnected:
                        break
                    }
                }
            }
            guard replica.revision >= target else {
                watch?.cancel()
                watch = nil
                return false
            }
            return true
        }

        /// Revokes the leases of this node's earlier runs still in etcd (it restarted before they ran out): their
        /// sessions end everywhere now, as lost with their node, instead of when the lease runs out.
        func revokePreviousIncarnations() {
            for incarnation in replica.incarnations(of: node.configuration.nodeID) where incarnation.lease != lease {
                try? client.revoke(lease: incarnation.lease)
            }
        }

        /// Revokes the leases of failed joins (``abandonedLeases``); one etcd does not answer for is tried again
        /// after the next answered renewal or join.
        mutating func revokeAbandonedLeases() {
            abandonedLeases = abandonedLeases.filter { abandoned in
                guard abandoned != lease else { return false }
                do {
                    try client.revoke(lease: abandoned)
                    return false
                } catch EtcdError.leaseNotFound {
                    return false
                } catch {
                    return true
                }
            }
        }

        mutating func handle(_ update: EtcdWatch.Update) {
            switch update {
            case .events(let events):
                let changes = replica.apply(events)
                _ = membership.handle(.watched(revision: replica.revision))
                if !changes.isEmpty { node.notify(.changes(changes)) }
            case .progress(let revision):
                _ = membership.handle(.watched(revision: revision))
            case .compacted:
                perform(membership.handle(.watchCompacted))
            case .connected, .disconnected:
                break
            }
        }

        // MARK: Writes

        /// The most operations etcd takes in one transaction (its `--max-txn-ops` default).
        static let maxOperations = 128

        /// The longest run of writes at the head of `writes` that fits one transaction: at most
        /// ``maxOperations`` operations with the fence's, and no key twice (etcd refuses a transaction that names a
        /// key twice). A loss's stamp goes alone: its transaction has a condition of its own, which must not decide the
        /// fate of other writes.
        func nextBatch(_ writes: ArraySlice<Write>) -> ArraySlice<Write> {
            var keys: Set<String> = []
            var operations = 1
            var bytes = 0
            var end = writes.startIndex
            while end < writes.endIndex {
                let these = self.operations(for: writes[end])
                let written = these.map(\.key)
                let size = these.reduce(0) { $0 + $1.bytes }
                guard
                    end == writes.startIndex
                        || (!Self.isStamp(writes[end]) && !Self.isStamp(writes[writes.startIndex])
                            && operations + these.count <= Self.maxOperations && bytes + size <= Self.maxBatchBytes
                            && keys.isDisjoint(with: written))
                else { break }
                keys.formUnion(written)
                operations += these.count
                bytes += size
                end += 1
            }
            return writes[writes.startIndex..<end]
        }

        /// The most bytes of keys and values one transaction carries, but a single write larger than that (a privacy
        /// choice of up to a megabyte goes alone): etcd takes a request of at most 1.5 MiB (`--max-request-bytes`);
        /// the bound leaves room for the operations' framing and the fence (it was set when the JSON gateway sent
        /// keys and values in base64, 4/3 of their size, and kept).
        static let maxBatchBytes = 512 * 1_024

        /// Whether a write is a loss's stamp: a transaction with a condition of its own, and no fence.
        static func isStamp(_ write: Write) -> Bool {
            if case .stampLoss = write { return true }
            return false
        }

        /// Notes what a write does to the node's live sessions, which a join writes again under a new lease.
        mutating func noteLocal(_ write: Write) {
            switch write {
            case .putSession(let id, let value, _): localSessions[id] = value
            case .endSession(let id, _): localSessions[id] = nil
            default: break
            }
        }

        /// What one write changes in etcd.
        func operations(for write: Write) -> [EtcdOperation] {
            let incarnation = ClusterKeys.Incarnation(node: node.configuration.nodeID, lease: lease)
            switch write {
            case .putSession(let id, let value, let user):
                let session = ClusterKeys.SessionKey(incarnation: incarnation, id: id)
                return [.put(key: keys.key(.session(session)), value: value, lease: lease)]
                    + (user.map { [.put(key: keys.key(.user($0.id)), value: $0.record, lease: 0)] } ?? [])
            case .endSession(let id, let user):
                let session = ClusterKeys.SessionKey(incarnation: incarnation, id: id)
                return [.delete(key: keys.key(.session(session)), prefix: false)]
                    + (user.map { [.put(key: keys.key(.user($0.id)), value: $0.record, lease: 0)] } ?? [])
            case .putUser(let id, let record):
                return [.put(key: keys.key(.user(id)), value: record, lease: 0)]
            case .putGroup(let id, let definition):
                return [.put(key: keys.key(.group(id)), value: definition, lease: 0)]
            case .deleteGroup(let id):
                return [.delete(key: keys.key(.group(id)), prefix: false)]
            case .putPrivacy(let key, let value):
                return [.put(key: keys.key(.privacy(key)), value: value, lease: 0)]
            case .stampLoss(let lost, let ending):
                return [.put(key: keys.key(.lost(lost)), value: ending, lease: lease)]
            case .abandonIfRejoined:
                return []
            }
        }

        /// What became of a batch of writes.
        enum BatchOutcome: Equatable {
            /// etcd took it, or refused it for good (each write then reported with ``Notification/writeFailed``).
            case written
            /// etcd could not answer: try the batch again later.
            case retry
            /// etcd no longer has the node's lease (it expired while the node could not renew it): the node must
            /// join again, and the batch goes under the new lease.
            case leaseGone
        }

        /// Sends a batch of writes as one transaction.
        ///
        /// Every transaction but a loss's stamp is fenced by the node's own key (``ClusterKeys/Entry/node(_:)``): it
        /// runs only if that key is still at the revision the node last wrote it (``fence``), and writes it again. A
        /// transaction the client gave up on (a member that stopped answering, weakness 4) and sent to the next member
        /// may still be carried out when that member runs again; by then the key has moved on, and the late copy
        /// changes nothing. Without the fence, a session's put held that way came back after the session's end
        /// (the fault run's bug 2).
        mutating func perform(_ batch: ArraySlice<Write>) -> BatchOutcome {
            for write in batch { noteLocal(write) }
            // Writes that change nothing in etcd (``Write/abandonIfRejoined(id:)``) send no transaction: an empty
            // one would make no revision for the membership to expect back.
            guard batch.contains(where: { !operations(for: $0).isEmpty }) else { return .written }
            let sent = nowMs
            do {
                if let stamp = batch.first, case .stampLoss(let lost, _) = stamp {
                    // Written only if no node stamped that loss before; if one did, the transaction does nothing
                    // (no revision of its own to expect back), and the stamp that counts comes through the watch.
                    let result = try client.txn(
                        compare: [.absent(keys.key(.lost(lost)))], success: operations(for: stamp))
                    if result.succeeded { perform(membership.handle(.wrote(revision: result.revision, nowMs: sent))) }
                    return .written
                }
                var result = try sendFenced(batch)
                if !result.succeeded {
                    // The node's key moved since the node wrote it: a write the node gave up on was carried out
                    // after all (or its lease is gone, and the put below says so). Nothing of this batch was
                    // written: take the key back, and send the batch once more.
                    fence = try client.put(nodeKey, node.configuration.description, lease: lease)
                    perform(membership.handle(.wrote(revision: fence, nowMs: sent)))
                    result = try sendFenced(batch)
                    // Moved again (another late copy): the next turn tries again.
                    guard result.succeeded else { return .retry }
                }
                fence = result.revision
                perform(membership.handle(.wrote(revision: result.revision, nowMs: sent)))
                return .written
            } catch let error as EtcdError where error.isUnavailable {
                perform(membership.handle(.callFailed(nowMs: sent)))
                return .retry
            } catch EtcdError.leaseNotFound {
                // Not dropped: the join that follows writes the node's live sessions under a new lease, and this
                // batch after it.
                return .leaseGone
            } catch {
                // Refused for good, and not for the lease: the owner ends the sessions whose put this was
                // (docs/cluster.md, "Honest under partition"), so that no acknowledged change is silently lost.
                for write in batch { node.notify(.writeFailed(write, "\(error)")) }
                return .written
            }
        }

        /// This incarnation's key, which fences its writes.
        var nodeKey: String {
            keys.key(.node(ClusterKeys.Incarnation(node: node.configuration.nodeID, lease: lease)))
        }

        /// Sends `batch` if the node's key is where the node last wrote it, writing the key again with it.
        func sendFenced(_ batch: ArraySlice<Write>) throws -> EtcdTxnResult {
            try client.txn(
                compare: [EtcdCompare(key: nodeKey, .equal, .modRevision(fence))],
                success: batch.flatMap { operations(for: $0) }
                    + [.put(key: nodeKey, value: node.configuration.description, lease: lease)])
        }
    }
}
