import RollCallCore
import RollCallWire

/// What a watcher of users and groups does, whatever its transport, as a value with no sockets, threads or clock: it
/// is told what happened (a connection, a record, a heartbeat, the app following someone, the time) and answers
/// what to do (subscribe, ask again, hand a record to the app, connect).
///
/// The rules (docs/protocol.md §8.4, §8.8, §8.9, §9.4):
/// - **Current value first.** Following a topic subscribes to it; the record or aggregate the subscription brings is
///   delivered even if its `seq` equals one already delivered (the app may have a new observer waiting for it).
/// - **The seq rule.** Any other record is delivered only if its `seq` is above the last one delivered for its user;
///   a group message only above its group's last `seq`, and its `changed` records by the record rule. A new epoch
///   forgets every `seq`.
/// - **Broker liveness.** Once a heartbeat has come on `broker/`, silence for ``silenceIntervals`` of its interval
///   is `.lost`; heartbeats back with the same epoch are `.recovered`, with another `.restarted`; a larger `dropped`
///   of the same epoch is `.fellBehind`.
/// - **Resync.** After `.recovered`, `.restarted` or `.fellBehind` the watcher asks again: it subscribes its topics
///   again (their current values come back) and `query`s the users it has delivered. Resyncs are at least 1 s apart,
///   doubling up to 30 s while the broker keeps reporting drops, back to 1 s after a heartbeat with no news.
/// - **The connection** (``Configuration/managesConnection``, a WebSocket): connect at start; when the connection
///   ends, at once if it had been working, else after the ``Backoff`` (the session machine's policy); a broker silent
///   on an open connection closes it, since a phone's link can die without a FIN. ``reconnectNow(now:)`` cuts the
///   wait. A ZeroMQ SUB reconnects by itself, so its shell never reports a connection's end.
/// - **Unanswered subscriptions** (``Configuration/resubscribesUnanswered``, ZeroMQ with CURVE may drop one,
///   protocol §16.3): a followed topic whose current value has not come within 1 s is subscribed again, then after
///   2, 4 … up to 30 s.
/// - **Resume** (``Configuration/resumes``, a WebSocket, docs/history.md): the machine keeps the highest `offset` of
///   the records it received and the presence log they belong to (``logEpoch(_:)``, told from `ping`). A new
///   connection resumes the users followed on the last one from there (``Action/resume(_:after:logEpoch:)``): the
///   transitions missed meanwhile come in order instead of only the current records. A resume the broker refuses
///   (``resumeRefused(_:now:)``) becomes a fresh subscription.
public struct WatchMachine: Sendable {
    /// How the transport behaves, which decides a few of the rules.
    public struct Configuration: Sendable, Equatable {
        /// The machine opens the connection and reopens it (a WebSocket); `false`: the transport does (a ZeroMQ SUB).
        public var managesConnection: Bool
        /// A followed topic whose current value does not come is subscribed again (ZeroMQ with CURVE).
        public var resubscribesUnanswered: Bool
        /// The transport counts subscriptions (libzmq): each follow needs its own unsubscribe. `false`: one
        /// unsubscribe drops the topic (the WebSocket), so it is sent only when the topic's last follower leaves.
        public var countsSubscriptions: Bool
        /// Always subscribe to `broker/`, for liveness (an app's watcher); `false`: only when followed.
        public var followsBroker: Bool
        /// A group message's `changed` records that the seq rule drops are taken out of it (an app's store applies
        /// what it is handed); `false`: the message is handed whole (observers that want the batch as sent).
        public var filtersGroupRecords: Bool
        /// A new connection resumes the users followed on the last one from the highest offset received (a
        /// WebSocket's `subscribe` with `after`); `false`: it subscribes afresh (the XPUB keeps nothing per
        /// subscriber).
        public var resumes: Bool

        /// A WebSocket watcher: the machine manages the connection and always follows `broker/`.
        public static let webSocket = Configuration(
            managesConnection: true, resubscribesUnanswered: false, countsSubscriptions: false, followsBroker: true,
            filtersGroupRecords: true, resumes: true)
        /// A ZeroMQ SUB: libzmq reconnects and counts subscriptions, and a subscription may be lost with CURVE.
        public static let zeroMQ = Configuration(
            managesConnection: false, resubscribesUnanswered: true, countsSubscriptions: true, followsBroker: false,
            filtersGroupRecords: false)

        /// A configuration of each rule; ``webSocket`` and ``zeroMQ`` are the two transports'.
        public init(
            managesConnection: Bool, resubscribesUnanswered: Bool, countsSubscriptions: Bool, followsBroker: Bool,
            filtersGroupRecords: Bool, resumes: Bool = false
        ) {
            self.resumes = resumes
            self.managesConnection = managesConnection
            self.resubscribesUnanswered = resubscribesUnanswered
            self.countsSubscriptions = countsSubscriptions
            self.followsBroker = followsBroker
            self.filtersGroupRecords = filtersGroupRecords
        }
    }

    /// Where the watcher's connection stands.
    public enum State: Sendable, Equatable {
        /// A connection is being opened (attempt 1 is the first since the last one that worked).
        case connecting(attempt: Int)
        /// The connection is open; `answered`: something came on it since (the subscribe's reply, an update).
        case connected(answered: Bool)
        /// Waiting until `until` to connect again; `attempt` failed attempts in a row so far.
        case waiting(until: Int64, attempt: Int)
        /// Stopped by the app.
        case closed
    }

    /// What the broker's heartbeat says, as the app sees it.
    public enum BrokerEvent: Sendable, Equatable {
        /// The first heartbeat arrived.
        case connected(epoch: String)
        /// No heartbeat for ``WatchMachine/silenceIntervals`` intervals: presence shown may be stale.
        case lost
        /// Heartbeats again, from the same run of the broker; a resync is on its way.
        case recovered(epoch: String)
        /// Heartbeats from a new run of the broker; seqs were forgotten and a resync is on its way.
        case restarted(epoch: String)
        /// The broker reports messages sent past full subscribers (`dropped` grew): a resync is on its way.
        case fellBehind(epoch: String)
    }

    /// What the shell does.
    public enum Action: Sendable, Equatable {
        /// Open a connection now.
        case connect
        /// Close the connection (the broker went silent on it); report its end with ``disconnected(now:)``.
        case closeConnection
        /// The connection will be tried again in this many milliseconds (for the app to show).
        case reconnectAfter(Int64)
        /// Subscribe to these topics (each brings its current value).
        case subscribe([Topic])
        /// Unsubscribe from these topics.
        case unsubscribe([Topic])
        /// Ask again for these topics' current values: on ZeroMQ a subscribe and an unsubscribe of each (libzmq's
        /// count stays), on a WebSocket a `subscribe`.
        case resubscribe([Topic])
        /// Subscribe to these presence topics with `after` and `log_epoch`: the transitions missed since come first,
        /// in order, then the live ones (no current value). Report a refusal with ``resumeRefused(_:now:)``.
        case resume([Topic], after: UInt64, logEpoch: String)
        /// `query` these users and report the answers with ``queried(_:now:)``.
        case query([UserID])
        /// Hand this record to the app.
        case deliver(PresenceRecord)
        /// Hand this group message to the app.
        case deliverGroup(GroupUpdate)
        /// Tell the app about the broker.
        case broker(BrokerEvent)
    }

    /// Heartbeat intervals of silence after which the broker counts as lost (docs/protocol.md §8.9).
    public static let silenceIntervals: Int64 = 3

    /// How the transport behaves.
    public let configuration: Configuration
    /// Where the connection stands.
    public private(set) var state: State
    /// How many times each topic is followed.
    public private(set) var followed: [Topic: Int] = [:]
    /// The `seq` of the last record delivered, per user.
    public private(set) var userSeqs: [UserID: UInt64] = [:]
    /// The `seq` of the last group message delivered, per group.
    public private(set) var groupSeqs: [GroupID: UInt64] = [:]
    /// Followed topics whose current value is awaited: when to subscribe again (ZeroMQ), and the spacing after that.
    private var awaiting: [Topic: (due: Int64, spacing: Int64)] = [:]
    private var liveness = Liveness()
    private var resync: (pending: Bool, due: Int64, spacing: Int64) = (false, 0, 1_000)
    private var backoff: Backoff
    /// The broker went silent on a connection and no heartbeat has come since: a connection's end counts as a
    /// failure (the backoff), and only a heartbeat starts the backoff over.
    private var silent = false
    /// The app asked for a fresh connection (``reconnectNow(now:)``): the end of this one is followed at once.
    private var reconnectAtOnce = false
    /// The presence log the broker keeps (`ping`'s `log_epoch`) and the highest offset received in it: where a new
    /// connection resumes from (``Configuration/resumes``).
    public private(set) var log: (epoch: String?, offset: UInt64?) = (nil, nil)
    /// The highest offset received on this connection, before its log was told: the offsets of that log.
    private var connectionOffset: UInt64?
    /// The presence topics whose state is whole on this connection (or was on the last): resumed, or their current
    /// record came. Only those a new connection may resume.
    private var carried: Set<Topic> = []
    /// Resumed topics whose reply has not come: until it does, no offset counts (a record of another topic could
    /// otherwise move the resume point past transitions the resume has not delivered yet).
    private var resuming: Set<Topic> = []

    /// A watcher at `now`. With ``Configuration/managesConnection`` it starts by connecting; `seed` makes the
    /// backoff's jitter repeatable in tests.
    public init(configuration: Configuration, now: Int64, seed: UInt64 = .random(in: 1...UInt64.max)) {
        self.configuration = configuration
        state = configuration.managesConnection ? .waiting(until: now, attempt: 0) : .connected(answered: false)
        backoff = Backoff(seed: seed)
        if configuration.followsBroker { followed[.broker] = 1 }
    }

    // MARK: The app

    /// The app follows `topic`. Subscribes (again, if followed already: the current value comes for the new follower).
    public mutating func follow(_ topic: Topic, now: Int64) -> [Action] {
        followed[topic, default: 0] += 1
        guard case .connected = state else { return [] }
        expect(topic, now: now)
        return [.subscribe([topic])]
    }

    /// The app stops following `topic` once. Its records stop when its last follower leaves.
    public mutating func unfollow(_ topic: Topic) -> [Action] {
        guard let count = followed[topic] else { return [] }
        let last = count == 1
        if last {
            followed[topic] = nil
            awaiting[topic] = nil
            carried.remove(topic)
            if case .presence(let user) = topic { userSeqs[user] = nil }
            if case .group(let group) = topic { groupSeqs[group] = nil }
        } else {
            followed[topic] = count - 1
        }
        guard case .connected = state, last || configuration.countsSubscriptions else { return [] }
        return [.unsubscribe([topic])]
    }

    /// The app stops the watcher.
    public mutating func close() { state = .closed }

    /// The network is back (or the app came to the foreground): connect at once instead of waiting out the backoff;
    /// an open connection on which the broker went silent is closed and made again.
    public mutating func reconnectNow(now: Int64) -> [Action] {
        backoff.reset()
        switch state {
        case .waiting(_, let attempt):
            state = .connecting(attempt: attempt + 1)
            return [.connect]
        case .connected where configuration.managesConnection && liveness.lost:
            // Closed by the app's wish, not by a new silence: the next connection is made at once.
            reconnectAtOnce = true
            return [.closeConnection]
        default:
            return []
        }
    }

    // MARK: The connection

    /// The connection opened: subscribe to everything followed.
    public mutating func connected(now: Int64) -> [Action] {
        guard state != .closed else { return [] }
        state = .connected(answered: false)
        // A new connection's first heartbeat is awaited afresh: the silence of the last one is not this one's.
        liveness.restart(now: now)
        let topics = followed.keys.sorted { $0.text < $1.text }
        // The users whose state was whole on the last connection resume where it stopped, first; the rest bring their
        // current values, after the resume (the broker answers a connection's requests in order).
        var actions: [Action] = []
        var resumed: [Topic] = []
        if configuration.resumes, let epoch = log.epoch, let after = log.offset {
            resumed = topics.filter { carried.contains($0) }
            if !resumed.isEmpty { actions.append(.resume(resumed, after: after, logEpoch: epoch)) }
        }
        resuming = Set(resumed)
        carried = resuming
        connectionOffset = nil
        let fresh = topics.filter { !resuming.contains($0) }
        for topic in fresh { expect(topic, now: now) }
        if !fresh.isEmpty { actions.append(.subscribe(fresh)) }
        return actions
    }

    /// The broker of this connection keeps the presence log `epoch` (`ping`'s `log_epoch`; `nil`: it keeps none),
    /// which stood at `offset` (`ping`'s `offset`) when the ping was answered. The offsets received are that log's: a
    /// log other than the last one starts the resume point over from them.
    ///
    /// The ping goes before anything is subscribed. On a connection that resumes nothing, every topic is then
    /// subscribed afresh, and each transition after `offset` comes on its subscription or is in the current record it
    /// brings: the resume point moves up to `offset`. Without that, a user still unknown at the subscription (a record
    /// without an offset), whose first transition was still held for the log when the connection ended, would leave
    /// no resume point, and the next connection would show only his current record, not the transitions before it.
    /// While a resume waits for its reply, the ping's offset counts no more than a record does.
    public mutating func logEpoch(_ epoch: String?, offset: UInt64? = nil) {
        if epoch != log.epoch { log = (epoch, epoch == nil ? nil : connectionOffset) }
        guard epoch != nil, let offset, resuming.isEmpty else { return }
        log.offset = max(log.offset ?? offset, offset)
    }

    /// The broker refused a ``Action/resume(_:after:logEpoch:)`` of `topics` (`snapshot_required`: the log cannot
    /// continue from there; `no_history`; or any other error): they are subscribed afresh, their current values
    /// coming as for a new follower.
    public mutating func resumeRefused(_ topics: [Topic], now: Int64) -> [Action] {
        resuming.subtract(topics)
        carried.subtract(topics)
        guard case .connected = state else { return [] }
        let still = topics.filter { followed[$0] != nil }
        for topic in still { expect(topic, now: now) }
        return still.isEmpty ? [] : [.subscribe(still)]
    }

    /// The broker took a ``Action/resume(_:after:logEpoch:)`` of `topics`: their missed transitions come next, and
    /// once no resume waits for its reply, offsets count again.
    public mutating func resumeAnswered(_ topics: [Topic]) {
        resuming.subtract(topics)
    }

    /// Something came on the connection (a reply, an update): it works. The backoff starts over too, unless the
    /// broker's heartbeat is what failed last time: then only a heartbeat starts it over, so that a broker too busy
    /// to publish is not met with a reconnection from every phone every three intervals.
    public mutating func answered() {
        guard case .connected(false) = state else { return }
        state = .connected(answered: true)
        if !silent { backoff.reset() }
    }

    /// The connection ended, or could not be made. Connects again at once if it had worked, else after the backoff.
    public mutating func disconnected(now: Int64) -> [Action] {
        let atOnce = reconnectAtOnce
        reconnectAtOnce = false
        switch state {
        case .closed: return []
        case .connected(answered: true) where !silent || atOnce:
            state = .connecting(attempt: 1)
            return [.connect]
        case .connecting(let attempt), .waiting(_, let attempt):
            let wait = backoff.next()
            state = .waiting(until: now + wait, attempt: attempt)
            return [.reconnectAfter(wait)]
        case .connected:
            let wait = backoff.next()
            state = .waiting(until: now + wait, attempt: 1)
            return [.reconnectAfter(wait)]
        }
    }

    // MARK: What arrives

    /// A record arrived on `presence/<user>/`.
    public mutating func record(_ record: PresenceRecord, now: Int64) -> [Action] {
        answered()
        let topic = Topic.presence(record.user)
        let current = awaiting.removeValue(forKey: topic) != nil
        if current, followed[topic] != nil { carried.insert(topic) }
        if resuming.isEmpty, let offset = record.offset {
            log.offset = max(log.offset ?? 0, offset)
            connectionOffset = max(connectionOffset ?? 0, offset)
        }
        return accept(record, current: current) ? [.deliver(record)] : []
    }

    /// The answers to a ``Action/query(_:)``: those newer than what was delivered.
    public mutating func queried(_ records: [PresenceRecord], now: Int64) -> [Action] {
        records.sorted { $0.user < $1.user }.compactMap { accept($0, current: false) ? .deliver($0) : nil }
    }

    /// A group message arrived on `group/<id>/`.
    public mutating func group(_ update: GroupUpdate, now: Int64) -> [Action] {
        answered()
        let current = awaiting.removeValue(forKey: .group(update.group)) != nil
        let kept = groupSeqs[update.group]
        if let kept, update.seq < kept || (update.seq == kept && !current) { return [] }
        groupSeqs[update.group] = update.seq
        var update = update
        let passed = update.changed.filter { accept($0, current: false) }
        if configuration.filtersGroupRecords { update.changed = passed }
        return [.deliverGroup(update)]
    }

    /// A heartbeat arrived on `broker/`.
    public mutating func heartbeat(_ heartbeat: BrokerHeartbeat, now: Int64) -> [Action] {
        silent = false
        answered()
        backoff.reset()
        guard let change = liveness.received(heartbeat, now: now) else {
            // A heartbeat with no news: drops have stopped, so the next resync may come soon again.
            resync.spacing = 1_000
            return []
        }
        switch change {
        case .recovered, .fellBehind:
            resync.pending = true
        case .restarted:
            userSeqs = [:]  // seqs of the old run mean nothing now
            groupSeqs = [:]
            resync.pending = true
        case .connected, .lost:
            break
        }
        return [.broker(change)] + dueResync(now: now)
    }

    /// The time is `now`: whatever is due.
    public mutating func tick(now: Int64) -> [Action] {
        var actions: [Action] = []
        if case .waiting(let until, let attempt) = state, now >= until {
            state = .connecting(attempt: attempt + 1)
            actions.append(.connect)
        }
        guard case .connected = state else { return actions }
        if configuration.resubscribesUnanswered {
            let late = awaiting.filter { now >= $0.value.due }.keys.sorted { $0.text < $1.text }
            for topic in late {
                let spacing = min(awaiting[topic]!.spacing * 2, 30_000)
                awaiting[topic] = (now + spacing, spacing)
            }
            if !late.isEmpty { actions.append(.resubscribe(late)) }
        }
        actions += dueResync(now: now)
        if let silentAt, now >= silentAt {
            if !liveness.lost { actions.append(.broker(.lost)) }
            liveness.silenced(now: now)
            // On a WebSocket the silence may be a link that died without a FIN: a fresh connection finds out, and
            // every further silence of that length tries another.
            if configuration.managesConnection {
                self.silent = true
                actions.append(.closeConnection)
            }
        }
        return actions
    }

    /// When ``tick(now:)`` has something to do next, or `nil` if only an input can bring something.
    public var nextDeadline: Int64? {
        var deadlines: [Int64] = []
        if case .waiting(let until, _) = state { deadlines.append(until) }
        if case .connected = state {
            if configuration.resubscribesUnanswered, let due = awaiting.values.map(\.due).min() {
                deadlines.append(due)
            }
            if resync.pending { deadlines.append(resync.due) }
            if let silent = silentAt { deadlines.append(silent) }
        }
        return deadlines.min()
    }

    /// Whether the broker is silent now: what is shown may be stale.
    public var brokerLost: Bool { liveness.lost }

    /// When the broker counts as silent (again, on a connection the machine manages; once, on one it does not).
    private var silentAt: Int64? {
        guard let last = liveness.last, !liveness.lost || configuration.managesConnection else { return nil }
        return last + liveness.interval * Self.silenceIntervals
    }

    // MARK: Rules

    /// The seq rule; `current`: the value a subscription brought, delivered also at an equal seq.
    private mutating func accept(_ record: PresenceRecord, current: Bool) -> Bool {
        if let kept = userSeqs[record.user], record.seq < kept || (record.seq == kept && !current) { return false }
        userSeqs[record.user] = record.seq
        return true
    }

    private mutating func expect(_ topic: Topic, now: Int64) {
        switch topic {
        case .presence, .group: awaiting[topic] = (now + 1_000, 1_000)
        case .allPresence, .broker: break  // no current value, or one every heartbeat anyway
        }
    }

    private mutating func dueResync(now: Int64) -> [Action] {
        guard resync.pending, now >= resync.due, case .connected = state else { return [] }
        resync.pending = false
        resync.due = now + resync.spacing
        resync.spacing = min(resync.spacing * 2, 30_000)
        var actions: [Action] = []
        let topics = followed.keys.filter { $0 != .allPresence && $0 != .broker }.sorted { $0.text < $1.text }
        for topic in topics { expect(topic, now: now) }
        if !topics.isEmpty { actions.append(.resubscribe(topics)) }
        let users = userSeqs.keys.sorted()
        if !users.isEmpty { actions.append(.query(users)) }
        return actions
    }
}

/// The broker's heartbeat as the watcher follows it: the epoch, `dropped`, and when it falls silent.
struct Liveness: Sendable {
    private var epoch: String?
    private var dropped: UInt64 = 0
    private(set) var lost = false
    /// When the last heartbeat came (or silence was last counted from); `nil` before the first.
    private(set) var last: Int64?
    private(set) var interval: Int64 = 1_000

    /// A new connection: silence is counted from now, if heartbeats have come before.
    mutating func restart(now: Int64) {
        if last != nil { last = now }
    }

    /// The broker was silent until `now`: lost, and silence counted again from now.
    mutating func silenced(now: Int64) {
        lost = true
        last = now
    }

    mutating func received(_ heartbeat: BrokerHeartbeat, now: Int64) -> WatchMachine.BrokerEvent? {
        last = now
        interval = max(1, heartbeat.intervalMilliseconds)
        let previousDropped = dropped
        let wasLost = lost
        defer {
            epoch = heartbeat.epoch
            lost = false
            dropped = heartbeat.dropped
        }
        guard let epoch else { return .connected(epoch: heartbeat.epoch) }
        if epoch != heartbeat.epoch { return .restarted(epoch: heartbeat.epoch) }
        if wasLost { return .recovered(epoch: epoch) }
        return heartbeat.dropped > previousDropped ? .fellBehind(epoch: epoch) : nil
    }
}
