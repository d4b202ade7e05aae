import RollCallCore
import RollCallWire

/// What a connection may do: everything, where no authentication is configured (the NULL mechanism, or a
/// WebSocket endpoint without tokens), or what the role of the key or token it authenticated with allows.
public enum Access: Equatable, Sendable {
    /// No authentication configured: every peer may do everything, as a broker without CURVE always did.
    case open
    /// Authenticated with a key (or token) that has this role.
    case role(Role)
    /// Authenticated with a key that is no longer in the table (removed by a reload): every request is refused.
    case revoked

    /// Whether this access may see the truth about `user` (an `invisible` status) whatever connection it asks on:
    /// operators, and the user's own keys.
    /// The user whose view of others this access reads with (docs/privacy.md): a `user` key's or token's user;
    /// `nil` for readers, operators and open access, who see the truth.
    public var viewer: UserID? {
        if case .role(.user(let own)) = self { own } else { nil }
    }

    public func seesTruth(about user: UserID) -> Bool {
        switch self {
        case .role(.operator): true
        case .role(.user(let own)): own == user
        case .open, .role(.reader), .revoked: false
        }
    }
}

/// Who may do what (docs/protocol.md §16.2, §16.3): one table for every transport, so that a CURVE key and a WebSocket token
/// with the same role are allowed the same requests and subscriptions.
///
/// | request | `user U` | `operator` | `reader` |
/// |---|---|---|---|
/// | `hello` for user X | X = U | yes | no |
/// | `heartbeat`, `status`, `bye` | U's sessions | yes | no |
/// | `query`, `ping`, `history` | yes | yes | yes |
/// | `group` that only reads | groups U is a member of | yes | yes |
/// | `events` (every user's transitions) | no | yes | yes |
/// | `group` that edits, `ungroup`, `advance` | no | yes | no |
/// | `privacy`, `block` for user X | X = U | yes | no |
/// | `contacts` | no | yes | no |
///
/// Pure: the caller says whose a session is, and who is a member of which group.
public enum Authorization {
    /// Why `access` may not make `request`, or `nil` when it may. `owner` names the user of a live session, or `nil`
    /// for a session that does not exist (the request then goes on, and fails as `unknown_session`). `isMember`
    /// says whether a user is a member of a group (a `user` key reads only its user's groups); without it, no one
    /// is.
    public static func refusal(
        of request: Request, by access: Access, owner: (SessionID) -> UserID?,
        isMember: (UserID, GroupID) -> Bool = { _, _ in false }
    ) -> PresenceError? {
        let role: Role
        switch access {
        case .open: return nil
        case .revoked:
            return PresenceError(.forbidden, "this key is no longer authorized: it may do nothing")
        case .role(let granted): role = granted
        }
        switch request {
        case .query, .ping, .queryAt, .history:
            return nil
        case .events:
            // Every user's transitions: the feed of the app's backend, not of one user's key.
            if case .user = role { return forbidden(role, "events") }
            return nil
        case .group(let group, let edit, _) where edit.isReadOnly:
            // The backend that made the group decided who shares presence in it: its members (docs/privacy.md).
            if case .user(let own) = role, !isMember(own, group) { return notMember(own, group) }
            return nil
        case .hello(let hello):
            if case .user(let own) = role, own != hello.user {
                return forbidden(role, "hello as \(hello.user)")
            }
            return role == .reader ? forbidden(role, "hello") : nil
        case .heartbeat(let session), .status(let session, _, _, _), .bye(let session):
            switch role {
            case .operator: return nil
            case .reader: return forbidden(role, "\(request.op) on a session")
            case .user(let own):
                guard let user = owner(session), user != own else { return nil }
                return forbidden(role, "\(request.op) on another user's session")
            }
        case .privacy(let user, _, _), .block(let user, _):
            // A user's own policy and blocks: the user's keys and tokens, or an operator (docs/privacy.md).
            switch role {
            case .operator: return nil
            case .reader: return forbidden(role, request.op)
            case .user(let own): return own == user ? nil : forbidden(role, "\(request.op) for \(user)")
            }
        case .contacts:
            // The app's backend owns its social graph.
            return role == .operator ? nil : forbidden(role, "contacts")
        case .group, .ungroup, .advance:
            return role == .operator ? nil : forbidden(role, request.op == "group" ? "editing a group" : request.op)
        }
    }

    /// Whether a subscription to `prefix` (the bytes after the XPUB's subscribe byte) is applied for `access`.
    /// Exact topics (`presence/<user>/`, `broker/`) are open to every role, and `group/<id>/` to the group's members
    /// (`isMember`; without it, no one is); any other prefix (`presence/`, `group/`, `presence/al`, the empty
    /// prefix) only to operators and readers, whose job is to watch everyone.
    public static func allowsSubscription(
        to prefix: some Collection<UInt8>, by access: Access, isMember: (UserID, GroupID) -> Bool = { _, _ in false }
    ) -> Bool {
        switch access {
        case .open, .role(.operator), .role(.reader): return true
        case .revoked: return false
        case .role(.user(let own)):
            switch Topic(subscription: prefix) {
            case .presence, .broker: return true
            case .group(let group): return isMember(own, group)
            case .allPresence, nil: return false
            }
        }
    }

    /// The refusal of a group read by a `user` key whose user is not a member. The same for a group that does not
    /// exist, so that the answer tells a non-member nothing about the group.
    public static func notMember(_ user: UserID, _ group: GroupID) -> PresenceError {
        PresenceError(
            .forbidden,
            "reading group \(group) is not allowed for this key: a key or token of user \(user) reads only the "
                + "groups \(user) is a member of")
    }

    private static func forbidden(_ role: Role, _ what: String) -> PresenceError {
        let summary =
            switch role {
            case .user(let user):
                "a key of user \(user) may say hello as \(user), touch \(user)'s sessions, set \(user)'s privacy "
                    + "and blocks, and read (query, ping, history, reading \(user)'s groups, exact topics)"
            case .reader: "a reader key may only read (query, ping, history, events, reading groups, any subscription)"
            case .operator: "an operator key may do everything"
            }
        return PresenceError(.forbidden, "\(what) is not allowed for this key: \(summary)")
    }
}

extension Role {
    /// The role as the authorized-keys file and the docs name it.
    public var name: String {
        switch self {
        case .user: "user"
        case .operator: "operator"
        case .reader: "reader"
        }
    }
}
