import Foundation
import RollCallClientCore
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
///
/// Records and group messages pass the seq rule first (docs/protocol.md §9.4, §8.8): duplicates and older records are
/// dropped, the current value an observer's own subscription brings is not. Every rule here is ``WatchMachine``'s,
/// shared with the WebSocket clients; this type owns the sockets and the observers.
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
    /// The user the key is bound to, for a `user` key: copies of records addressed to other viewers are dropped.
    private let viewer: UserID?

    /// A watcher of the update endpoint `endpoint`, with CURVE when given `credentials`. With `commandEndpoint`, it
    /// also `query`s the users it has seen when it resynchronises, which covers users followed through
    /// ``observeAll(_:)``. `viewer` is the user a `user` key is bound to: the records of users with privacy settings
    /// come to it on its own copy of their topics (protocol §8.2); without it they are dropped as another viewer's.
    public init(
        endpoint: String, commandEndpoint: String? = nil, credentials: CurveCredentials? = nil,
        viewer: UserID? = nil, context: Context? = nil
    ) throws {
        self.commandEndpoint = commandEndpoint
        self.credentials = credentials
        self.viewer = viewer
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
        // Every rule (the seq rule, liveness, spaced resyncs, re-subscribing what brought nothing) is the watch
        // machine's, shared with the WebSocket watcher; this loop owns the sockets and carries out its actions.
        let start = ContinuousClock.now
        let clock = {
            let elapsed = ContinuousClock.now - start
            return elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        }
        var machine = WatchMachine(configuration: .zeroMQ, now: clock())
        while true {
            // The poll waits for the machine's next deadline (rounded up, so that the tick finds it due).
            let timeout = machine.nextDeadline.map { max(0, Int($0 - clock()) + 1) } ?? -1
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
                perform(subscribe ? machine.follow(topic, now: clock()) : machine.unfollow(topic), socket, &machine)
            }
            while let frames = receive(socket) {
                // Another viewer's copy (which a reader's or an operator's prefix receives too) is not ours.
                guard frames.count == 2, let received = ReceivedTopic(frames[0].bytes), received.isFor(viewer) else {
                    continue
                }
                switch received.topic {
                case .broker:
                    guard let heartbeat = try? Codec.decodeBrokerHeartbeat(frames[1].bytes) else { continue }
                    perform(machine.heartbeat(heartbeat, now: clock()), socket, &machine)
                case .group:
                    guard let update = try? Codec.decodeGroupUpdate(frames[1].bytes) else { continue }
                    perform(machine.group(update, now: clock()), socket, &machine)
                case .presence, .allPresence:
                    guard let record = try? Codec.decodeRecord(frames[1].bytes) else { continue }
                    perform(machine.record(record, now: clock()), socket, &machine)
                }
            }
            // Silence counts only once everything that arrived was read: a slow observer is not a lost broker.
            perform(machine.tick(now: clock()), socket, &machine)
        }
    }

    /// Carries out the machine's actions on the SUB socket and the observers.
    private func perform(_ actions: [WatchMachine.Action], _ socket: Socket, _ machine: inout WatchMachine) {
        for action in actions {
            switch action {
            case .subscribe(let topics), .unsubscribe(let topics):
                let subscribe = if case .subscribe = action { true } else { false }
                for topic in topics {
                    do {
                        try socket.set(subscribe ? .subscribe(topic.bytes) : .unsubscribe(topic.bytes))
                    } catch {
                        let what = subscribe ? "subscribing to" : "unsubscribing from"
                        dispatch(.broker(.failed("\(what) \(topic.text) failed: \(error)")), topic: Topic.broker.text)
                    }
                }
            case .resubscribe(let topics):
                for topic in topics {
                    // Subscribing again sends the subscription to the broker (libzmq's SUB sends every one), which
                    // brings the current state; taking the extra one back at once leaves libzmq's count as it was.
                    do {
                        try socket.set(.subscribe(topic.bytes))
                        try socket.set(.unsubscribe(topic.bytes))
                    } catch {
                        dispatch(
                            .broker(.failed("resubscribing to \(topic.text) failed: \(error)")),
                            topic: Topic.broker.text)
                    }
                }
            case .resume:
                break  // not in the ZeroMQ configuration: the XPUB keeps nothing per subscriber
            case .query(let users):
                perform(machine.queried(query(users), now: 0), socket, &machine)
            case .deliver(let record):
                dispatch(.presence(record), topic: Topic.presence(record.user).text)
                dispatch(.presence(record), topic: Topic.allPresence.text)
            case .deliverGroup(let update):
                dispatch(.group(update), topic: Topic.group(update.group).text)
            case .broker(let change):
                dispatch(.broker(BrokerEvent(change)), topic: Topic.broker.text)
            case .connect, .closeConnection, .reconnectAfter:
                break  // libzmq makes and remakes the connection by itself
            }
        }
    }

    /// The current records of `users`, from the command endpoint if there is one (none otherwise).
    private func query(_ users: [UserID]) -> [PresenceRecord] {
        guard let commandEndpoint,
            let client = try? CommandClient(
                endpoint: commandEndpoint, timeoutMilliseconds: 3_000, credentials: credentials)
        else { return [] }
        var records: [PresenceRecord] = []
        for start in stride(from: 0, to: users.count, by: 1_000) {
            guard let answers = try? client.query(Array(users[start..<min(start + 1_000, users.count)])) else {
                break
            }
            records += answers.values
        }
        return records
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

extension PresenceWatcher.BrokerEvent {
    /// The watch machine's word for what the heartbeat says, in the watcher's terms.
    init(_ event: WatchMachine.BrokerEvent) {
        switch event {
        case .connected(let epoch): self = .connected(epoch: epoch)
        case .lost: self = .lost
        case .recovered(let epoch): self = .recovered(epoch: epoch)
        case .restarted(let epoch): self = .restarted(epoch: epoch)
        case .fellBehind(let epoch): self = .fellBehind(epoch: epoch)
        }
    }
}
