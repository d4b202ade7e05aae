// The client's API speaks in the core's types (UserID, Status, PresenceRecord, GroupID, ...): importing
// RollCallClient is enough to use them.
@_exported import RollCallCore
