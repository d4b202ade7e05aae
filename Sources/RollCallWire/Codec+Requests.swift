import RollCallCore

/// Turns request bodies into ``Request`` values and back.
public enum Codec {}

extension Codec {
    /// Decodes one request body. Every failure carries the error code and message to answer with, and the
    /// request's `id` when the body was an object with a scalar `id`.
    public static func decodeRequest(
        _ body: UnsafeRawBufferPointer, maxQueryUsers: Int = 1_000
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
            let request = try decodeRequest(Fields(fields), maxQueryUsers: maxQueryUsers)
            return .success(RequestEnvelope(id: id, request: request))
        } catch {
            return .failure(RequestRejection(id: id, error: error))
        }
    }

    public static func decodeRequest(_ body: [UInt8], maxQueryUsers: Int = 1_000) -> Result<
        RequestEnvelope, RequestRejection
    > {
        body.withUnsafeBytes { decodeRequest($0, maxQueryUsers: maxQueryUsers) }
    }

    private static func decodeRequest(_ fields: Fields, maxQueryUsers: Int) throws(PresenceError) -> Request {
        guard let op = try fields.string("op") else { throw PresenceError(.badRequest, "field 'op' is required") }
        switch op {
        case "hello":
            let status = try fields.status("status") ?? .online
            return .hello(
                PresenceCore.Hello(
                    user: try fields.requiredUser("user"), device: try fields.string("device"), status: status,
                    text: try fields.string("text"), ttlMilliseconds: try fields.integer("ttl_ms")))
        case "heartbeat":
            return .heartbeat(session: try fields.requiredSession())
        case "status":
            guard let status = try fields.status("status") else {
                throw PresenceError(.badRequest, "field 'status' is required")
            }
            return .status(session: try fields.requiredSession(), status: status, text: try fields.string("text"))
        case "bye":
            return .bye(session: try fields.requiredSession())
        case "query":
            guard let value = fields["users"] else { throw PresenceError(.badRequest, "field 'users' is required") }
            guard case .array(let elements) = value else {
                throw PresenceError(.badRequest, "field 'users' must be an array of user ids, not \(value.typeName)")
            }
            guard elements.count <= maxQueryUsers else {
                throw PresenceError(.limit, "query names \(elements.count) users; at most \(maxQueryUsers)")
            }
            return .query(
                users: try elements.map { (element) throws(PresenceError) in try user(element, field: "users") })
        case "ping":
            return .ping
        default:
            throw PresenceError(.unknownOp, "unknown op '\(op)'")
        }
    }

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
    let members: [String: JSON]
    init(_ members: [String: JSON]) { self.members = members }

    subscript(_ name: String) -> JSON? {
        guard let value = members[name], value != .null else { return nil }
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

    func requiredSession() throws(PresenceError) -> SessionID {
        guard let text = try string("session") else { throw PresenceError(.badRequest, "field 'session' is required") }
        return SessionID(text)
    }
}
