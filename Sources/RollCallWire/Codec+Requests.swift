import RollCallCore

/// Turns request bodies into ``Request`` values and back.
public enum Codec {}

extension Codec {
    /// Decodes one request body. Every failure carries the error code and message to answer with, and the
    /// request's `id` when the body was an object with a scalar `id`.
    public static func decodeRequest(
        _ body: UnsafeRawBufferPointer, limits: PresenceCore.Configuration = .init()
    ) -> Result<RequestEnvelope, RequestRejection> {
        let json: JSON
        do {
            json = try JSONParser.parse(body)
        } catch {
            return .failure(RequestRejection(id: nil, error: PresenceError(.badRequest, "body is not JSON: \(error)")))
        }
        guard case .object(let fields) = json else {
            return .failure(
                RequestRejection(
                    id: nil, error: PresenceError(.badRequest, "body must be a JSON object, not \(json.typeName)")))
        }
        var id: JSON?
        if let raw = fields["id"] {
            guard raw.isScalar else {
                return .failure(
                    RequestRejection(id: nil, error: PresenceError(.badRequest, "id must be a JSON scalar")))
            }
            id = raw
        }
        do {
            let request = try decodeRequest(Fields(fields), limits: limits)
            return .success(RequestEnvelope(id: id, request: request))
        } catch {
            return .failure(RequestRejection(id: id, error: error))
        }
    }

    public static func decodeRequest(
        _ body: [UInt8], limits: PresenceCore.Configuration = .init()
    ) -> Result<RequestEnvelope, RequestRejection> {
        body.withUnsafeBytes { decodeRequest($0, limits: limits) }
    }

    static func decodeRequest(
        _ fields: Fields, limits: PresenceCore.Configuration
    ) throws(PresenceError) -> Request {
        guard let op = try fields.string("op") else { throw PresenceError(.badRequest, "field 'op' is required") }
        switch op {
        case "hello":
            let status = try fields.status("status") ?? .online
            return .hello(
                PresenceCore.Hello(
                    user: try fields.requiredUser("user"), device: try fields.string("device"), status: status,
                    text: try fields.string("text"), ttlMilliseconds: try fields.integer("ttl_ms"),
                    keepAlive: try keepAlive(fields)))
        case "heartbeat":
            return .heartbeat(session: try fields.requiredSession())
        case "status":
            guard let status = try fields.status("status") else {
                throw PresenceError(.badRequest, "field 'status' is required")
            }
            let after = try fields.integer("after_ms")
            if let after, !(1...PresenceCore.maxHoldMilliseconds).contains(after) {
                throw PresenceError(
                    .badRequest, "field 'after_ms' must be from 1 to \(PresenceCore.maxHoldMilliseconds), not \(after)")
            }
            return .status(
                session: try fields.requiredSession(), status: status, text: try fields.string("text"),
                afterMilliseconds: after)
        case "bye":
            return .bye(session: try fields.requiredSession())
        case "query":
            guard fields["users"] != nil else { throw PresenceError(.badRequest, "field 'users' is required") }
            let users = try fields.users("users", max: limits.maxQueryUsers, what: "a query names")!
            guard let at = try fields.integer("at") else { return .query(users: users) }
            return .queryAt(users: users, at: BrokerTime(milliseconds: at))
        case "history":
            return .history(
                HistoryQuery(
                    user: try fields.requiredUser("user"), from: try fields.integer("from").map(BrokerTime.init),
                    to: try fields.integer("to").map(BrokerTime.init), after: try fields.offset("after"),
                    limit: try fields.limit()))
        case "events":
            guard let after = try fields.offset("after") else {
                throw PresenceError(.badRequest, "field 'after' is required (0: from the log's start)")
            }
            return .events(after: after, logEpoch: try fields.string("log_epoch"), limit: try fields.limit())
        case "ping":
            return .ping
        case "group":
            let max = limits.maxGroupSize
            return .group(
                try fields.requiredGroup(),
                GroupEdit(
                    members: try fields.users("members", max: max, what: "a group holds"),
                    add: try fields.users("add", max: max, what: "a group holds") ?? [],
                    remove: try fields.users("remove", max: max, what: "a group holds") ?? []),
                after: try fields["after"].map { (value) throws(PresenceError) in try Codec.user(value, field: "after")
                })
        case "ungroup":
            return .ungroup(try fields.requiredGroup())
        case "privacy", "contacts", "block":
            return try decodePrivacyRequest(op, fields, limits: limits)
        case "advance":
            // Decoded always; a broker outside test mode answers it as an unknown op.
            guard let milliseconds = try fields.integer("ms") else {
                throw PresenceError(.badRequest, "field 'ms' is required")
            }
            guard (0...maxAdvanceMilliseconds).contains(milliseconds) else {
                throw PresenceError(
                    .badRequest, "field 'ms' must be from 0 to \(maxAdvanceMilliseconds) (a year), not \(milliseconds)")
            }
            return .advance(milliseconds: milliseconds)
        default:
            throw PresenceError(.unknownOp, "unknown op '\(op)'")
        }
    }

    /// The longest single `advance`: a year, far past any deadline a setting allows.
    public static let maxAdvanceMilliseconds: Int64 = 31_536_000_000

    static func user(_ value: JSON, field: String) throws(PresenceError) -> UserID {
        guard let text = value.string else {
            throw PresenceError(.badRequest, "field '\(field)' must hold user id strings, not \(value.typeName)")
        }
        guard let user = UserID(validating: text) else {
            throw PresenceError(.badUser, "invalid user id \(quoted(text)): 1 to 128 bytes of A-Z a-z 0-9 . _ @ + -")
        }
        return user
    }

    /// A short, printable rendering of client-supplied text for an error message.
    static func quoted(_ text: String) -> String {
        let shown = text.unicodeScalars.prefix(40).map { $0.isASCII && $0.value >= 0x20 ? String($0) : "?" }.joined()
        return "'\(shown)\(text.unicodeScalars.count > 40 ? "..." : "")'"
    }
}

/// Typed access to a request's fields, each failure a `bad_request` naming the field.
struct Fields {
    let members: [JSONKey: JSON]
    init(_ members: [JSONKey: JSON]) { self.members = members }

    subscript(_ name: String) -> JSON? {
        guard let value = members[JSONKey(name)], value != .null else { return nil }
        return value
    }

    func string(_ name: String) throws(PresenceError) -> String? {
        guard let value = self[name] else { return nil }
        guard let text = value.string else {
            throw PresenceError(.badRequest, "field '\(name)' must be a string, not \(value.typeName)")
        }
        return text
    }

    func integer(_ name: String) throws(PresenceError) -> Int64? {
        guard let value = self[name] else { return nil }
        guard let number = value.integer else {
            throw PresenceError(.badRequest, "field '\(name)' must be an integer, not \(value.typeName)")
        }
        return number
    }

    func status(_ name: String) throws(PresenceError) -> Status? {
        guard let text = try string(name) else { return nil }
        guard let status = Status(rawValue: text) else {
            throw PresenceError(
                .badRequest, "field '\(name)' must be one of online, away, busy, offline, not \(Codec.quoted(text))")
        }
        return status
    }

    func requiredUser(_ name: String) throws(PresenceError) -> UserID {
        guard let value = self[name] else { throw PresenceError(.badRequest, "field '\(name)' is required") }
        return try Codec.user(value, field: name)
    }

    /// A list of user ids, `nil` when absent; the length is checked before the ids are read.
    func users(_ name: String, max: Int, what: String) throws(PresenceError) -> [UserID]? {
        guard let value = self[name] else { return nil }
        guard case .array(let elements) = value else {
            throw PresenceError(.badRequest, "field '\(name)' must be an array of user ids, not \(value.typeName)")
        }
        guard elements.count <= max else {
            throw PresenceError(.limit, "'\(name)' names \(elements.count) users; \(what) at most \(max)")
        }
        return try elements.map { (element) throws(PresenceError) in try Codec.user(element, field: name) }
    }

    func requiredGroup() throws(PresenceError) -> GroupID {
        guard let value = self["group"] else { throw PresenceError(.badRequest, "field 'group' is required") }
        guard let text = value.string else {
            throw PresenceError(.badRequest, "field 'group' must be a string, not \(value.typeName)")
        }
        guard let group = GroupID(validating: text) else {
            throw PresenceError(
                .badGroup, "invalid group id \(Codec.quoted(text)): 1 to 128 bytes of A-Z a-z 0-9 . _ @ + -")
        }
        return group
    }

    /// A log offset: an integer from 0.
    func offset(_ name: String) throws(PresenceError) -> UInt64? {
        guard let value = try integer(name) else { return nil }
        guard let offset = UInt64(exactly: value) else {
            throw PresenceError(.badRequest, "field '\(name)' must be an offset from 0, not \(value)")
        }
        return offset
    }

    /// A page's `limit`: from 1 to ``HistoryQuery/maxLimit``, ``HistoryQuery/defaultLimit`` when absent.
    func limit() throws(PresenceError) -> Int {
        guard let value = try integer("limit") else { return HistoryQuery.defaultLimit }
        guard (1...Int64(HistoryQuery.maxLimit)).contains(value) else {
            throw PresenceError(.badRequest, "field 'limit' must be from 1 to \(HistoryQuery.maxLimit), not \(value)")
        }
        return Int(value)
    }

    func requiredSession() throws(PresenceError) -> SessionID {
        guard let text = try string("session") else { throw PresenceError(.badRequest, "field 'session' is required") }
        return SessionID(text)
    }
}
