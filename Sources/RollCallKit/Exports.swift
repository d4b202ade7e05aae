// The SDK speaks in the core's types (UserID, GroupID, Status, PresenceRecord): importing RollCallKit is enough.
@_exported import RollCallCore
