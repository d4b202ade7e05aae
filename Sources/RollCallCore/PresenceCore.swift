import HeapModule

/// The presence state machine: sessions, their liveness, and each user's record.
///
/// It is a value with no sockets, threads or clock: every event is a mutating call that is handed the current
/// ``BrokerTime`` and returns its reply and the records to publish. The event loop asks ``nextDeadline`` when to
/// wake and then calls ``tick(now:)``.
public struct PresenceCore: Sendable {
    /// Limits and timings, with the documented defaults.
    public struct Configuration: Sendable, Equatable {
        /// The heartbeat interval the broker asks of clients.
        public var heartbeatMilliseconds: Int64 = 1_000
        /// The TTL of a session whose hello names none.
        public var defaultTTLMilliseconds: Int64 = 3_000
        /// The bounds a requested TTL is clamped to.
        public var minTTLMilliseconds: Int64 = 1_000
        public var maxTTLMilliseconds: Int64 = 3_600_000
        /// Live sessions one user may hold.
        public var maxSessionsPerUser = 32
        /// Live sessions in the whole broker.
        public var maxSessions = 1_000_000
        /// The longest custom status line, in Unicode code points.
        public var maxTextLength = 256
        /// The longest device name, in bytes.
        public var maxDeviceLength = 128
        /// How long a session whose connection closed may come back over a new connection before it ends
        /// (0: it ends at once, reason `closed`).
        public var offlineGraceMilliseconds: Int64 = 0
        /// The most users one `query` may name.
        public var maxQueryUsers = 1_000
        /// At most one message per group per this window; changes within it are coalesced.
        public var groupBatchMilliseconds: Int64 = 50
        /// Members of one group.
        public var maxGroupSize = 10_000
        /// Groups in the whole broker.
        public var maxGroups = 1_000_000
        /// Memberships over all groups.
        public var maxMemberships = 10_000_000
        /// Contacts one user may list, and, separately, users one user may block (docs/privacy.md).
        public var maxContacts = 5_000

        public init() {}
    }

    struct User: Sendable {
        var sessions: [SessionID] = []
        var status: Status = .offline
        var text: String?
        var since: BrokerTime?
        var lastSeen: BrokerTime?
        var seq: UInt64 = 0
        var reason: OfflineReason?
        /// The session count of the last record: a change of it is a change of the record.
        var publishedSessions = 0
        /// The log offset of the last record (PresenceCore+Log.swift); 0 if it has none.
        var offset: UInt64 = 0
    }

    /// A session's expiry check. A heartbeat only moves `Session.expiresAt`, and a check that finds the session
    /// renewed puts itself back at the new time, so a live session has one check, or two while it waits out a
    /// grace period. Checks of ended sessions stay until they come due; ``compactExpiriesIfStale()`` keeps them
    /// below twice the live sessions plus 1,024.
    struct ExpiryCheck: Comparable, Sendable {
        var at: BrokerTime
        var session: SessionID
        static func < (lhs: ExpiryCheck, rhs: ExpiryCheck) -> Bool { lhs.at < rhs.at }
        static func == (lhs: ExpiryCheck, rhs: ExpiryCheck) -> Bool { lhs.at == rhs.at && lhs.session == rhs.session }
    }

    public let configuration: Configuration
    var sessions: [SessionID: Session] = [:]
    var users: [UserID: User] = [:]
    var connections: [ConnectionID: Set<SessionID>] = [:]
    var expiries = Heap<ExpiryCheck>()
    /// When held status changes come due (PresenceCore+HeldStatus.swift); entries of replaced holds stay until then.
    var heldChanges = Heap<ExpiryCheck>()
    var statusChanges: UInt64 = 0
    var groups: [GroupID: GroupState] = [:]
    var memberships: [UserID: Set<GroupID>] = [:]
    var membershipTotal = 0
    var groupFlushes = Heap<GroupFlush>()
    var retiredGroupSeqs: [GroupID: UInt64] = [:]
    /// What changed since the store was last given the changes (see PresenceCore+Persistence.swift).
    var changedUsers: Set<UserID> = []
    var changedGroups: Set<GroupID> = []
    /// Whether changes are noted for a store; a broker without one turns this off, or the sets would only grow.
    public var tracksChanges = true
    /// Restart placeholders still standing; they count for no session limit.
    var placeholderCount = 0
    /// Whether records take log offsets (PresenceCore+Log.swift); off unless the broker keeps a log.
    public internal(set) var logsTransitions = false
    var lastOffset: UInt64 = 0
    var transitions: [LogEntry] = []
    /// Who may see whom (PresenceCore+Privacy.swift): only users whose settings differ from the defaults.
    var privacy: [UserID: PrivacyState] = [:]
    /// Users whose privacy settings changed since the store was last given them.
    var changedPrivacy: Set<UserID> = []
    /// Blocks the other way round: for each blocked viewer, the users who block it (PresenceCore+GroupBlocks.swift).
    var blockedBy: [UserID: Set<UserID>] = [:]
    /// The available users, and their visible sessions, that some viewer may not see (``PrivacyState/concealed``):
    /// kept as records change and settings toggle, so that the broker heartbeat's counts leave them out at no cost.
    var concealedAvailable = 0
    var concealedSessions = 0

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// The number of live sessions.
    public var sessionCount: Int { sessions.count }

    /// Live sessions whose status is `invisible`.
    var invisibleSessionCount = 0

    /// Live sessions of the cluster's store (PresenceCore+Remote.swift).
    var remoteSessions = 0

    /// The number of live sessions others may know of: the `invisible` ones left out.
    public var visibleSessionCount: Int { sessions.count - invisibleSessionCount }

    /// The counts every viewer may know of, for the broker heartbeat, which goes to every subscriber alike: the
    /// available users and visible sessions, less those of users whose settings hide them from some viewer (a
    /// visibility other than `everyone`, or a block). A count that held them would tell a viewer that someone
    /// hidden from it came online (docs/privacy.md).
    public var publicCounts: (usersAvailable: Int, sessions: Int) {
        (availableUserCount - concealedAvailable, visibleSessionCount - concealedSessions)
    }

    /// Sessions ended since the core was made, by why they ended (one count per session, not per user): for
    /// metrics.
    public internal(set) var sessionsEnded: [OfflineReason: UInt64] = [:]

    /// A step in a session's life, for the debug log: "why did alice show offline at 10:02?".
    public enum SessionEvent: Sendable, Equatable {
        case opened(SessionID, UserID, connection: ConnectionID?)
        /// A request named the session over another connection (or over one again after it had lost its own).
        case moved(SessionID, UserID, from: ConnectionID?, to: ConnectionID)
        /// Its connection closed; it waits out the grace period.
        case detached(SessionID, UserID)
        /// Its status or text changed.
        case changed(SessionID, UserID)
        case ended(SessionID, UserID, OfflineReason)
    }

    /// Whether session events are noted for ``takeSessionEvents()`` (the broker turns it on at debug level only).
    public var recordsSessionEvents = false
    var sessionEvents: [SessionEvent] = []

    /// The session events noted since the last call.
    public mutating func takeSessionEvents() -> [SessionEvent] {
        defer { sessionEvents = [] }
        return sessionEvents
    }

    /// Changes noted for the store and not yet taken.
    public var pendingChangeCount: Int { changedUsers.count + changedGroups.count + changedPrivacy.count }

    /// The expiry checks the core holds, those of ended sessions included: what the compaction bounds.
    public var expiryCheckCount: Int { expiries.count }

    /// The number of users available now.
    public internal(set) var availableUserCount = 0

    /// When ``tick(now:)`` next has work to do (a session to end, a held status to apply, a group batch to flush);
    /// `nil` when none.
    public var nextDeadline: BrokerTime? {
        earliest(earliest(expiries.min?.at, heldChanges.min?.at), groupFlushes.min?.at)
    }
}

/// The earlier of two optional times; `nil` only when both are.
func earliest(_ a: BrokerTime?, _ b: BrokerTime?) -> BrokerTime? {
    switch (a, b) {
    case (let a?, let b?): min(a, b)
    case (let a, let b): a ?? b
    }
}

extension PresenceCore {
    /// What the broker does because of an event: every event's output is one list of these, in order, which the
    /// loop carries out as it is (hummingbird's state machines return their actions the same way).
    ///
    /// Keeping state is not an action: the store gets one batch per write interval, not a write per event, so the
    /// core notes what changed and the loop takes it on its write timer (``takeChanges(now:)``).
    public enum Action: Sendable, Equatable {
        /// Publish a user's new record on `presence/<user>/`.
        case publish(PresenceRecord)
        /// Publish a group message on `group/<id>/`: a batch of member changes, or a deletion.
        case publishGroup(GroupUpdate)
    }
}

extension Array where Element == PresenceCore.Action {
    /// The records among the actions, in order.
    public var records: [PresenceRecord] {
        compactMap { if case .publish(let record) = $0 { record } else { nil } }
    }

    /// The group messages among the actions, in order.
    public var groupUpdates: [GroupUpdate] {
        compactMap { if case .publishGroup(let update) = $0 { update } else { nil } }
    }
}

/// What an event produced: the reply for the client and the actions for the broker, in order.
public struct Outcome<Reply> {
    public var reply: Result<Reply, PresenceError>
    public var actions: [PresenceCore.Action]

    /// The records the actions publish.
    public var updates: [PresenceRecord] { actions.records }

    init(_ reply: Result<Reply, PresenceError>, updates: [PresenceRecord] = []) {
        self.reply = reply
        self.actions = updates.map(PresenceCore.Action.publish)
    }

    init(_ reply: Result<Reply, PresenceError>, actions: [PresenceCore.Action]) {
        self.reply = reply
        self.actions = actions
    }

    static func failure(_ code: ErrorCode, _ message: String) -> Outcome {
        Outcome(.failure(PresenceError(code, message)))
    }
}

extension Outcome: Sendable where Reply: Sendable {}
