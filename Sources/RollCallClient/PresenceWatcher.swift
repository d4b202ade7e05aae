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
public final class PresenceWatcher: Sendable {
    /// What an observer is handed.
    public enum Event: Sendable {
        case presence(PresenceRecord)
        case group(GroupUpdate)
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

    public init(endpoint: String) throws {
        let context = try Context()
        let socket = try Socket(context, .sub)
        try socket.set(.linger(milliseconds: 0))
        try socket.connect(endpoint)
        let name = "watcher-\(ObjectIdentifier(socket).hashValue)"
        let (waker, wakeSocket) = try Waker.make(context: context, name: name)
        self.waker = waker
        let handOff = HandOff((socket, wakeSocket, context))
        Thread { [self] in
            let (socket, wakeSocket, context) = handOff.take()
            withExtendedLifetime(context) { self.run(socket: socket, wake: wakeSocket) }
        }.start()
    }

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

    /// Stops the thread; no observer is called after this returns.
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

    private func run(socket: Socket, wake: Socket) {
        defer { finished.signal() }
        var poller = Poller([socket, wake])
        while true {
            _ = try? poller.poll(timeout: -1)
            try? wake.drain()
            let (changes, stopping) = observers.withLock { state in
                defer { state.pending = [] }
                return (state.pending, state.stopping)
            }
            if stopping { return }
            for (topic, subscribe) in changes {
                try? socket.set(subscribe ? .subscribe(topic.bytes) : .unsubscribe(topic.bytes))
            }
            while let (frames, _) = try? socket.receiveMessage(), frames.count == 2 {
                let topic = String(decoding: frames[0].bytes, as: UTF8.self)
                let event: Event
                if topic.hasPrefix(Topic.groupPrefix), let update = try? Codec.decodeGroupUpdate(frames[1].bytes) {
                    event = .group(update)
                } else if let record = try? Codec.decodeRecord(frames[1].bytes) {
                    event = .presence(record)
                } else {
                    continue
                }
                let targets = observers.withLock { Array(($0.byTopic[topic] ?? [:]).values) }
                for observer in targets { observer(event) }
            }
        }
    }
}
