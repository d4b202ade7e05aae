/// A group id: the same rules as a user id.
public struct GroupID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init?(validating text: String) {
        guard UserID.isValid(text) else { return nil }
        rawValue = text
    }

    public static func < (lhs: GroupID, rhs: GroupID) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { rawValue }
}

/// How many members of a group have each status.
public struct StatusCounts: Equatable, Sendable {
    public var online = 0
    public var busy = 0
    public var away = 0
    public var offline = 0

    public init(online: Int = 0, busy: Int = 0, away: Int = 0, offline: Int = 0) {
        self.online = online
        self.busy = busy
        self.away = away
        self.offline = offline
    }

    /// Members who are available in any form (not offline).
    public var available: Int { online + busy + away }
    public var total: Int { available + offline }

    public subscript(status: Status) -> Int {
        get {
            switch status {
            case .online: online
            case .busy: busy
            case .away: away
            case .offline, .invisible: offline  // an invisible user counts as offline
            }
        }
        set {
            switch status {
            case .online: online = newValue
            case .busy: busy = newValue
            case .away: away = newValue
            case .offline, .invisible: offline = newValue
            }
        }
    }
}

/// A change to a group's members: replace them all, or add and remove some. Neither only reads.
public struct GroupEdit: Equatable, Sendable {
    public var members: [UserID]?
    public var add: [UserID]
    public var remove: [UserID]

    public init(members: [UserID]? = nil, add: [UserID] = [], remove: [UserID] = []) {
        self.members = members
        self.add = add
        self.remove = remove
    }

    public var isReadOnly: Bool { members == nil && add.isEmpty && remove.isEmpty }
}

/// A group as the `group` request answers it: the aggregate and a page of members' records in id order.
public struct GroupSnapshot: Equatable, Sendable {
    public var group: GroupID
    public var counts: StatusCounts
    public var members: [PresenceRecord]
    public var seq: UInt64
    /// When more members follow: the id to read on from (the request's `after`); nil on the last page.
    public var next: UserID?

    public init(group: GroupID, counts: StatusCounts, members: [PresenceRecord], seq: UInt64, next: UserID? = nil) {
        self.group = group
        self.counts = counts
        self.members = members
        self.seq = seq
        self.next = next
    }
}

/// A message on `group/<id>/`: the aggregate, the members whose records changed or who were added since the
/// previous message, the members taken out, or the group's deletion.
public struct GroupUpdate: Equatable, Sendable {
    public var group: GroupID
    public var counts: StatusCounts
    public var changed: [PresenceRecord]
    public var removed: [UserID]
    public var seq: UInt64
    public var deleted: Bool

    public init(
        group: GroupID, counts: StatusCounts, changed: [PresenceRecord], removed: [UserID], seq: UInt64,
        deleted: Bool = false
    ) {
        self.group = group
        self.counts = counts
        self.changed = changed
        self.removed = removed
        self.seq = seq
        self.deleted = deleted
    }
}
