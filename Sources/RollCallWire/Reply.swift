import RollCallCore

/// A successful answer to a request.
public enum Reply: Equatable, Sendable {
    /// `hello`: the session and its timings.
    case hello(PresenceCore.Granted)
    /// `heartbeat`, `status`, `bye`: done, nothing more to say.
    case done
    /// `status` with `after_ms`: the change is held, to take effect later if nothing replaces it.
    case held
    /// `query`: the records asked for, each user once; `positions` holds, for each record, the index in the
    /// request's `users` where that user was first named (a paged reply's `next` is one of them). Empty positions
    /// stand for 0, 1, 2 and so on.
    case query([PresenceRecord], positions: [Int] = [])
    /// `ping`: who the broker is.
    case ping(BrokerInfo)
    /// `group`: the aggregate and a page of members' records.
    case group(GroupSnapshot)
    /// `ungroup`: whether there was such a group.
    case ungroup(deleted: Bool)
    /// `advance` (test mode): the broker's clock after it.
    case advanced(time: BrokerTime)
    /// `history` and `events`: a page of transitions, oldest first; `next` (the last one's offset) when more may
    /// follow; where the log stands now.
    case log(LogPage)
    /// `privacy`: the policy now in force.
    case privacy(PrivacyPolicy)
    /// `contacts` and `block`: how many users the list holds now, under `name` (`contacts` or `blocks`).
    case listCount(name: String, count: Int)
}

/// A page of the presence log, as `history` and `events` answer it.
public struct LogPage: Equatable, Sendable {
    /// The reply's key for the entries: `history` or `events`.
    public var name: String
    public var entries: [LogEntry]
    /// The offset to ask `after` for the next page, when this one is full.
    public var next: UInt64?
    /// Where the log stands: its epoch and latest offset.
    public var position: LogPosition

    public init(name: String, entries: [LogEntry], next: UInt64?, position: LogPosition) {
        self.name = name
        self.entries = entries
        self.next = next
        self.position = position
    }
}

/// Which presence log a broker keeps (`log_epoch`, new whenever the log is lost with its data) and its latest offset.
public struct LogPosition: Equatable, Sendable {
    public var epoch: String
    public var offset: UInt64

    public init(epoch: String, offset: UInt64) {
        self.epoch = epoch
        self.offset = offset
    }
}

/// The broker's identity, as `ping` answers it.
public struct BrokerInfo: Equatable, Sendable {
    /// The broker's configured id (the host name by default).
    public var broker: String
    /// The RollCall version.
    public var version: String
    /// Changes at every start of the broker: a client that sees it change knows the broker restarted.
    public var epoch: String
    /// The broker's clock.
    public var time: BrokerTime
    /// Whether the broker runs in test mode: its clock moves only by `advance` (never in production).
    public var testMode: Bool
    /// The node and its standing, when the broker is a node of a cluster (docs/cluster.md).
    public var cluster: ClusterStanding?
    /// The presence log's epoch and latest offset, when the broker keeps one (docs/history.md).
    public var log: LogPosition?

    public init(
        broker: String, version: String, epoch: String, time: BrokerTime, testMode: Bool = false,
        cluster: ClusterStanding? = nil, log: LogPosition? = nil
    ) {
        self.broker = broker
        self.version = version
        self.epoch = epoch
        self.time = time
        self.testMode = testMode
        self.cluster = cluster
        self.log = log
    }
}

/// A cluster node's name and where it stands, as `ping` and the broker heartbeat carry them (docs/cluster.md).
public struct ClusterStanding: Equatable, Sendable {
    /// Where a node stands with the cluster's store.
    public enum State: String, Sendable, CaseIterable {
        /// Joining, or joining again: it takes no sessions yet.
        case joining
        /// In the cluster: it takes sessions and vouches for what it answers.
        case live
        /// Its lease may have run out (no renewal answered for two thirds of it): it takes no new sessions,
        /// acknowledges nothing on its sessions but a `bye`, and answers no reads (`cluster_unavailable`) until etcd
        /// renews its lease or it joins again.
        case cutOff = "cut_off"
        /// Stopping.
        case stopped
    }

    /// The node id (`--node-id`).
    public var node: String
    public var state: State

    public init(node: String, state: State) {
        self.node = node
        self.state = state
    }
}
