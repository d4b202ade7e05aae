import RollCallCore

/// A group as stored: the core's own definition (its members and latest seq). ``PresenceStore/load()`` returns the
/// members sorted, and a user listed twice is stored once.
public typealias StoredGroup = PresenceCore.GroupDefinition
