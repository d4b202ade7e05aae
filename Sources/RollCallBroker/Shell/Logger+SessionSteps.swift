import Logging
import RollCallCore

extension Logger {
    /// Logs sessions' steps at debug level (the machine reports them only when the level is debug).
    func debug(_ events: [PresenceCore.SessionEvent]) {
        for event in events {
            switch event {
            case .opened(let session, let user, let connection):
                debug(
                    "session opened",
                    metadata: [
                        "session": "\(session)", "user": "\(user)",
                        "connection": "\(connection.map { "\($0)" } ?? "none")",
                    ])
            case .moved(let session, let user, let from, let to):
                debug(
                    "session moved to a new connection",
                    metadata: [
                        "session": "\(session)", "user": "\(user)", "from": "\(from.map { "\($0)" } ?? "none")",
                        "to": "\(to)",
                    ])
            case .detached(let session, let user):
                debug(
                    "session lost its connection; waiting out the grace period",
                    metadata: ["session": "\(session)", "user": "\(user)"])
            case .changed(let session, let user):
                debug("session changed its status", metadata: ["session": "\(session)", "user": "\(user)"])
            case .ended(let session, let user, let reason):
                debug("session ended", metadata: ["session": "\(session)", "user": "\(user)", "reason": "\(reason)"])
            }
        }
    }
}
