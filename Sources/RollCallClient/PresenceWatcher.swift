import Foundation
import RollCallCore
import RollCallWire
import Synchronization
import ZeroMQ

/// Follows users and groups on the update endpoint from its own thread and calls observers with what arrives.
///
/// Any number of observers may follow the same user or group; each gets every message, and removing one leaves the
/// others working. The topic stays subscribed while it has an observer. Observers are called on the watcher's
/// thread, one at a time.
///
/// When it may have missed updates (the broker's heartbeat reports `dropped` updates, or heartbeats come back after
/// a silence), the watcher resynchronises: it subscribes its users' and groups' topics again, which brings their
/// current records and aggregates, and, given a command endpoint, `query`s every user it has passed a record of
/// and passes on the answers that are newer than what it passed before. Resynchronisations are 1 s apart at least,
/// doubling up to 30 s while the broker keeps reporting drops.
public final class PresenceWatcher: Sendable {
    /// What an observer is handed.
    public enum Event: Sendable {
        case presence(PresenceRecord)
        case group(GroupUpdate)
        case broker(BrokerEvent)
    }

    /// What the watcher knows of the broker, from its heartbeat on `broker/`.
    public enum BrokerEvent: Sendable, Equatable {
        /// The first heartbeat arrived.
        case connected(epoch: String)
        /// No heartbeat for three intervals: the broker or the network is down, presence may be out of date.
        case lost
        /// Heartbeats again, from the same run of the broker.
        case recovered(epoch: String)
        /// Heartbeats again, from a new run of the broker (its epoch changed): followed topics were subscribed
        /// again, so their current state is on its way.
        case restarted(epoch: String)
        /// The broker reports updates that a full subscriber missed (its heartbeat's `dropped` grew): this watcher
        /// may be that subscriber. It is resynchronising: the current state is on its way.
        case fellBehind(epoch: String)
        /// A call on the watcher's socket failed (the text says which and why): updates may be missed. After a
        /// failed wait the watcher stops; after a failed subscription it goes on without that subscription.
        case failed(String)
    }

    /// Identifies an observer, to remove it.
    public struct Token: Hashable, Sendable {
        let id: Int
        let topic: Topic
    }

    private struct Observers {
        var byTopic: [String: [Int: @Sendable (Event) -> Void]] = [:]
        var nextID = 0
        /// Subscription changes for the thread to apply to its socket: (topic, subscribe?).
        var pending: [(Topic, Bool)] = []
        var stopping = false
    }

    private let observers = Mutex(Observers())
    private let waker: Waker
    private let finished = DispatchSemaphore(value: 0)
    private let commandEndpoint: String?
    private let credentials: CurveCredentials?

    /// A watcher of the update endpoint `endpoint`, with CURVE when given `credentials`. With `commandEndpoint`, it
    /// also `query`s the users it has seen
    /// when it resynchronises, which covers users followed through ``observeAll(_:)``.
    public init(
        endpoint: String, commandEndpoint: String? = nil, credentials: CurveCredentials? = nil,
        context: Context? = nil
    ) throws {
        self.commandEndpoint = commandEndpoint
        self.credentials = credentials
        let context = try context ?? .shared()
        let socket = try Socket(context, .sub)
        try socket.set(.linger(milliseconds: 0))
        try credentials?.apply(to: socket)
        // libzmq tells a subscriber that the broker refused its key only through the socket monitor (libzmq#3505).
        let handshakes = try HandshakeWatch(socket, curve: credentials != nil, context: context)
        try socket.connect(endpoint)
        let name = "watcher-\(Self.instances.add(1, ordering: .relaxed).newValue)"
        let (waker, wakeSocket) = try Waker.make(context: context, name: name)
        self.waker = waker
        let handOff = HandOff((socket, wakeSocket, handshakes))
        Thread { [self] in
            let (socket, wakeSocket, handshakes) = handOff.take()
            defer { handshakes.close() }
            self.run(socket: socket, wake: wakeSocket, handshakes: handshakes)
        }.start()
    }

    /// Numbers the watchers of this process, for their wake-up sockets' unique names in the shared context.
    private static let instances = Atomic<Int>(0)

    /// Calls `observer` with every record of `user`, starting with the current one.
    public func observe(_ user: UserID, _ observer: @escaping @Sendable (PresenceRecord) -> Void) -> Token {
        add(.presence(user)) { event in
            if case .presence(let record) = event { observer(record) }
        }
    }

    /// Calls `observer` with every message of `group`: first its aggregate, then the aggregate with the members that
    /// changed, batched by the broker.
    public func observe(group: GroupID, _ observer: @escaping @Sendable (GroupUpdate) -> Void) -> Token {
        add(.group(group)) { event in
            if case .group(let update) = event { observer(update) }
        }
    }

    /// Calls `observer` with every record of every user (no current state is sent for this subscription).
    public func observeAll(_ observer: @escaping @Sendable (PresenceRecord) -> Void) -> Token {
        add(.allPresence) { event in
            if case .presence(let record) = event { observer(record) }
        }
    }

    /// Calls `observer` when the broker's heartbeat arrives first, stops, comes back, or shows a restart.
    public func observeBroker(_ observer: @escaping @Sendable (BrokerEvent) -> Void) -> Token {
        add(.broker) { event in
            if case .broker(let change) = event { observer(change) }
        }
    }

    /// Stops calling the observer. libzmq counts subscriptions, one per observer here, so each removal takes one
    /// back: the topic is unsubscribed when its last observer goes.
    public func remove(_ token: Token) {
        observers.withLock { state in
            guard state.byTopic[token.topic.text]?.removeValue(forKey: token.id) != nil else { return }
            if state.byTopic[token.topic.text]?.isEmpty == true { state.byTopic[token.topic.text] = nil }
            state.pending.append((token.topic, false))
        }
        waker.wake()
    }

    /// Stops the thread; no observer is called after this returns. Not from an observer, which runs on the
    /// watcher's own thread: it would wait for itself.
    public func close() {
        observers.withLock { $0.stopping = true }
        waker.wake()
        finished.wait()
        finished.signal()
        waker.close()
    }

    private func add(_ topic: Topic, _ observer: @escaping @Sendable (Event) -> Void) -> Token {
        let id = observers.withLock { state in
            state.nextID += 1
            state.byTopic[topic.text, default: [:]][state.nextID] = observer
            // Subscribing again, also for a second observer, makes the broker send the current state at once.
            state.pending.append((topic, true))
            return state.nextID
        }
        waker.wake()
        return Token(id: id, topic: topic)
    }

    private func run(socket: Socket, wake: Socket, handshakes: HandshakeWatch) {
        defer { finished.signal() }
        var poller = Poller([socket, wake, handshakes.monitor])
        var refusalReported = false  // a refused handshake is reported once, until one succeeds
        var broker = BrokerTracker()
        var seen: [UserID: UInt64] = [:]  // the latest seq passed on, per user
        var resync = false
        // Resynchronisations are spaced: 1 s apart, doubling up to 30 s while the broker keeps reporting drops (a
        // subscriber that stays full raises `dropped` at every heartbeat, and every watcher's queries cost the
        // broker), back to 1 s after a heartbeat that reports none.
        var nextResync = ContinuousClock.now
        var resyncSpacing = Duration.seconds(1)
        // Topics subscribed whose current state has not arrived yet. A broker with CURVE may drop a subscription
        // it reads at a bad moment (protocol §16.3): one that brings nothing within a second is made again, then
        // after 2, 4 … up to 30 s.
        var awaiting: [String: (due: ContinuousClock.Instant, spacing: Duration)] = [:]
        while true {
            var timeout = broker.timeout
            if let due = awaiting.values.map(\.due).min() {
                let left = ContinuousClock.now.duration(to: due)
                let wait = max(
                    0, Int(left.components.seconds * 1_000 + left.components.attoseconds / 1_000_000_000_000_000) + 1)
                timeout = timeout < 0 ? wait : min(timeout, wait)
            }
            if resync {
                let left = ContinuousClock.now.duration(to: nextResync)
                let wait = max(
                    0, Int(left.components.seconds * 1_000 + left.components.attoseconds / 1_000_000_000_000_000) + 1)
                timeout = timeout < 0 ? wait : min(timeout, wait)
            }
            do {
                _ = try poller.poll(timeout: timeout)
                try wake.drain()
            } catch {
                // The context is ending or the sockets are broken: nothing more can arrive.
                dispatch(.broker(.failed("waiting for updates failed: \(error)")), topic: Topic.broker.text)
                return
            }
            let refusal = handshakes.refusal()
            if let refusal, !refusalReported {
                dispatch(.broker(.failed(refusal.description)), topic: Topic.broker.text)
            }
            refusalReported = refusal != nil
            let (changes, stopping) = observers.withLock { state in
                defer { state.pending = [] }
                return (state.pending, state.stopping)
            }
            if stopping { return }
            for (topic, subscribe) in changes {
                switch topic {
                case .presence, .group: awaiting[topic.text] = subscribe ? (.now + .seconds(1), .seconds(1)) : nil
                case .allPresence, .broker: break
                }
                do {
                    try socket.set(subscribe ? .subscribe(topic.bytes) : .unsubscribe(topic.bytes))
                } catch {
                    let what = subscribe ? "subscribing to" : "unsubscribing from"
                    dispatch(.broker(.failed("\(what) \(topic.text) failed: \(error)")), topic: Topic.broker.text)
                }
            }
            while let frames = receive(socket) {
                guard frames.count == 2 else { continue }
                let topic = String(decoding: frames[0].bytes, as: UTF8.self)
                if !awaiting.isEmpty { awaiting[topic] = nil }
                if topic == Topic.broker.text {
                    guard let heartbeat = try? Codec.decodeBrokerHeartbeat(frames[1].bytes) else { continue }
                    guard let change = broker.received(heartbeat) else {
                        resyncSpacing = .seconds(1)
                        continue
                    }
                    switch change {
                    case .recovered, .fellBehind: resync = true
                    case .restarted:
                        seen = seen.mapValues { _ in 0 }  // seqs of the old run mean nothing now
                        resync = true
                    case .connected, .lost, .failed: break
                    }
                    dispatch(.broker(change), topic: topic)
                } else if topic.hasPrefix(Topic.groupPrefix) {
                    guard let update = try? Codec.decodeGroupUpdate(frames[1].bytes) else { continue }
                    dispatch(.group(update), topic: topic)
                } else if let record = try? Codec.decodeRecord(frames[1].bytes) {
                    seen[record.user] = max(seen[record.user] ?? 0, record.seq)
                    dispatch(.presence(record), topic: topic)
                    dispatch(.presence(record), topic: Topic.allPresence.text)
                }
            }
            let now = ContinuousClock.now
            for (topic, wait) in awaiting where now >= wait.due {
                // Subscribing again sends the subscription to the broker (libzmq's SUB sends every one); taking the
                // extra one back at once leaves the count of this topic's subscriptions as it was.
                let bytes = Array(topic.utf8)
                try? socket.set(.subscribe(bytes))
                try? socket.set(.unsubscribe(bytes))
                let spacing = min(wait.spacing * 2, .seconds(30))
                awaiting[topic] = (now + spacing, spacing)
            }
            if resync, ContinuousClock.now >= nextResync {
                resync = false
                nextResync = .now + resyncSpacing
                resyncSpacing = min(resyncSpacing * 2, .seconds(30))
                resynchronise(socket: socket, seen: &seen)
            }
            // Silence counts only once everything that arrived was read: a slow observer is not a lost broker.
            if let change = broker.checkSilence() { dispatch(.broker(change), topic: Topic.broker.text) }
        }
    }

    /// Asks again for the current state of what this watcher follows (see the type's documentation).
    private func resynchronise(socket: Socket, seen: inout [UserID: UInt64]) {
        let topics = observers.withLock { Array($0.byTopic.keys) }
        for topic in topics where topic != Topic.allPresence.text && topic != Topic.broker.text {
            // Subscribing again makes the broker send the current state; taking the extra subscription back at
            // once leaves libzmq's count of this topic's subscriptions as it was.
            let bytes = Array(topic.utf8)
            do {
                try socket.set(.subscribe(bytes))
                try socket.set(.unsubscribe(bytes))
            } catch {
                dispatch(.broker(.failed("resubscribing to \(topic) failed: \(error)")), topic: Topic.broker.text)
            }
        }
        guard let commandEndpoint, !seen.isEmpty,
            let client = try? CommandClient(
                endpoint: commandEndpoint, timeoutMilliseconds: 3_000, credentials: credentials)
        else { return }
        let users = Array(seen.keys)
        for start in stride(from: 0, to: users.count, by: 1_000) {
            guard let answers = try? client.query(Array(users[start..<min(start + 1_000, users.count)])) else {
                return
            }
            for record in answers.values where record.seq > seen[record.user] ?? 0 {
                seen[record.user] = record.seq
                dispatch(.presence(record), topic: Topic.presence(record.user).text)
                dispatch(.presence(record), topic: Topic.allPresence.text)
            }
        }
    }

    /// The next message waiting, or `nil` when none is (or reading failed: then broker observers are told).
    private func receive(_ socket: Socket) -> [Socket.Frame]? {
        do {
            return try socket.receiveMessage()?.frames
        } catch {
            dispatch(.broker(.failed("reading an update failed: \(error)")), topic: Topic.broker.text)
            return nil
        }
    }

    private func dispatch(_ event: Event, topic: String) {
        let targets = observers.withLock { Array(($0.byTopic[topic] ?? [:]).values) }
        for observer in targets { observer(event) }
    }
}

/// Follows the broker's heartbeat: the epoch, and how long since the last one.
struct BrokerTracker {
    private var epoch: String?
    private var dropped: UInt64 = 0
    private var lost = false
    private var last = ContinuousClock.now
    private var interval: Duration = .seconds(1)

    /// How long the poll may wait before the broker counts as silent, in milliseconds.
    var timeout: Int {
        let left = ContinuousClock.now.duration(to: last + interval * 3)
        return lost
            ? -1
            : max(0, Int(left.components.seconds * 1_000 + left.components.attoseconds / 1_000_000_000_000_000) + 1)
    }

    mutating func received(_ heartbeat: BrokerHeartbeat) -> PresenceWatcher.BrokerEvent? {
        last = .now
        interval = .milliseconds(max(1, heartbeat.intervalMilliseconds))
        let previousDropped = dropped
        defer {
            epoch = heartbeat.epoch
            lost = false
            dropped = heartbeat.dropped
        }
        guard let epoch else { return .connected(epoch: heartbeat.epoch) }
        if epoch != heartbeat.epoch { return .restarted(epoch: heartbeat.epoch) }
        if lost { return .recovered(epoch: epoch) }
        return heartbeat.dropped > previousDropped ? .fellBehind(epoch: epoch) : nil
    }

    /// `.lost` once, when three intervals passed without a heartbeat.
    mutating func checkSilence() -> PresenceWatcher.BrokerEvent? {
        guard !lost, ContinuousClock.now >= last + interval * 3 else { return nil }
        lost = true
        return .lost
    }
}
