// The session's states and failures are the transport-free client core's.
@_exported import RollCallClientCore
// The client's API speaks in the core's types (UserID, Status, PresenceRecord, GroupID, ...): importing
// RollCallClient is enough to use them.
@_exported import RollCallCore
