/// What subscribers and queries learn about one user.
public struct PresenceRecord: Equatable, Sendable {
    public var user: UserID
    /// The effective status: that of the user's most available session, `offline` without sessions.
    public var status: Status
    /// The custom status line of the session whose status wins, if it set one.
    public var text: String?
    /// When the status or text last changed; `nil` for a user never seen.
    public var since: BrokerTime?
    /// When the user was last available: the record's own time while available; `nil` if never available.
    public var lastSeen: BrokerTime?
    /// How many live sessions the user has.
    public var sessions: Int
    /// A version that only grows, also across restarts; 0 for a user never seen.
    public var seq: UInt64
    /// Why the user is not available, when they were before.
    public var reason: OfflineReason?
    /// Where this record stands in the presence log (docs/history.md): set by a broker that keeps one, `nil`
    /// otherwise and for a user with no transition in it.
    public var offset: UInt64?

    public init(
        user: UserID, status: Status, text: String? = nil, since: BrokerTime?, lastSeen: BrokerTime?,
        sessions: Int, seq: UInt64, reason: OfflineReason? = nil, offset: UInt64? = nil
    ) {
        self.user = user
        self.status = status
        self.text = text
        self.since = since
        self.lastSeen = lastSeen
        self.sessions = sessions
        self.seq = seq
        self.reason = reason
        self.offset = offset
    }

    /// The record of a user the broker has never seen.
    public static func unknown(_ user: UserID) -> PresenceRecord {
        PresenceRecord(user: user, status: .offline, since: nil, lastSeen: nil, sessions: 0, seq: 0)
    }
}
