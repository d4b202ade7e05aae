import RollCallCore

/// A group as stored: its members and its latest seq.
public struct StoredGroup: Sendable, Equatable {
    public var group: GroupID
    /// The members, a set: ``PresenceStore/load()`` returns them sorted, a user listed twice is stored once.
    public var members: [UserID]
    public var seq: UInt64

    public init(group: GroupID, members: [UserID], seq: UInt64) {
        self.group = group
        self.members = members
        self.seq = seq
    }
}
