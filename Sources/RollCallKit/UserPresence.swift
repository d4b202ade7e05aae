import RollCallCore

/// What the store knows of one user, as a view shows it: a dot, a status line, "last seen 5 min ago".
public struct UserPresence: Sendable, Equatable {
    /// Whose presence this is.
    public var user: UserID
    /// The effective status; `offline` for a user the store knows nothing of.
    public var status: Status
    /// The custom status line, if the user set one.
    public var text: String?
    /// When the user was last available, in broker time (milliseconds since 1970); `nil` if never seen available.
    public var lastSeen: Int64?
    /// When the status or text last changed, in broker time.
    public var since: Int64?
    /// The record's version (docs/protocol.md §9.4); 0 when unknown.
    public var seq: UInt64
    /// Shown from memory only: read from the cache file on a cold start, or the broker is not reachable now. A view
    /// greys such a dot out.
    public var stale: Bool
    /// Whether any record of the user has come (from the broker or the cache).
    public var known: Bool

    /// Nothing known of `user` yet.
    public static func unknown(_ user: UserID) -> UserPresence {
        UserPresence(user: user, status: .offline, seq: 0, stale: true, known: false)
    }

    /// A presence as given (for previews and tests).
    public init(
        user: UserID, status: Status, text: String? = nil, lastSeen: Int64? = nil, since: Int64? = nil,
        seq: UInt64, stale: Bool, known: Bool
    ) {
        self.user = user
        self.status = status
        self.text = text
        self.lastSeen = lastSeen
        self.since = since
        self.seq = seq
        self.stale = stale
        self.known = known
    }

    init(_ record: PresenceRecord, stale: Bool) {
        self.init(
            user: record.user, status: record.status, text: record.text, lastSeen: record.lastSeen?.milliseconds,
            since: record.since?.milliseconds, seq: record.seq, stale: stale, known: true)
    }

    /// Whether the user is available (online, busy or away).
    public var isAvailable: Bool { status != .offline }
}

/// What the store knows of one group: the header "3 of 5 online".
public struct GroupPresence: Sendable, Equatable {
    /// Which group this is.
    public var group: GroupID
    /// Members whose status is not `offline`.
    public var online: Int
    /// Members.
    public var total: Int
    /// Members by status.
    public var counts: StatusCounts
    /// The group was deleted.
    public var deleted: Bool
    /// No aggregate has come yet, or the broker is not reachable now.
    public var stale: Bool

    /// Nothing known of `group` yet.
    public static func unknown(_ group: GroupID) -> GroupPresence {
        GroupPresence(group: group, online: 0, total: 0, counts: StatusCounts(), deleted: false, stale: true)
    }

    /// A group's presence as given (for previews and tests).
    public init(group: GroupID, online: Int, total: Int, counts: StatusCounts, deleted: Bool, stale: Bool) {
        self.group = group
        self.online = online
        self.total = total
        self.counts = counts
        self.deleted = deleted
        self.stale = stale
    }
}
