import RollCallCore

/// Decoding `privacy`, `contacts` and `block` (docs/protocol.md §6.12-§6.14, docs/privacy.md).
extension Codec {
    static func decodePrivacyRequest(
        _ op: String, _ fields: Fields, limits: PresenceCore.Configuration
    ) throws(PresenceError) -> Request {
        let user = try fields.requiredUser("user")
        switch op {
        case "privacy":
            return .privacy(
                user: user, visibility: try fields.audience("visibility"), lastSeen: try fields.audience("last_seen"))
        case "contacts":
            return .contacts(user: user, try fields.listEdit(verbs: ["set", "add", "remove"], max: limits.maxContacts))
        default:
            return .block(user: user, try fields.listEdit(verbs: ["add", "remove"], max: limits.maxContacts))
        }
    }
}

extension Fields {
    /// `everyone`, `contacts` or `nobody`; `nil` when absent.
    func audience(_ name: String) throws(PresenceError) -> Audience? {
        guard let text = try string(name) else { return nil }
        guard let audience = Audience(rawValue: text) else {
            throw PresenceError(
                .badRequest, "field '\(name)' must be one of everyone, contacts, nobody, not \(Codec.quoted(text))")
        }
        return audience
    }

    /// Exactly one of `verbs`, holding a list of user ids of at most `max` entries.
    func listEdit(verbs: [String], max: Int) throws(PresenceError) -> ListEdit {
        if !verbs.contains("set"), self["set"] != nil {
            throw PresenceError(.badRequest, "field 'set' is not allowed here: use add or remove")
        }
        let present = verbs.filter { self[$0] != nil }
        guard present.count == 1 else {
            throw PresenceError(
                .badRequest, "exactly one of \(verbs.joined(separator: ", ")) is required, not \(present.count)")
        }
        let verb = present[0]
        let names = try users(verb, max: max, what: "a list holds")!
        switch verb {
        case "set": return .set(names)
        case "add": return .add(names)
        default: return .remove(names)
        }
    }
}
