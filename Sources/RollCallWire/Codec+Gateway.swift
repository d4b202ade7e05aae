import RollCallCore

/// What a WebSocket client sends in one text frame: a request of the command socket, or one of the WebSocket's own
/// ops (docs/websocket.md).
public enum GatewayRequest: Sendable, Equatable {
    /// `hello`, `heartbeat`, `status`, `bye`, `query`, `group`, `ungroup`, `ping`: as on the command socket.
    case request(RequestEnvelope)
    /// `subscribe` with `topics`: the updates of each topic, its last value first; with `after` (a log offset),
    /// the presence transitions after it instead of the last value (a resume, docs/history.md).
    case subscribe(id: JSON?, topics: [Topic], after: UInt64? = nil, logEpoch: String? = nil)
    /// `unsubscribe` with `topics`.
    case unsubscribe(id: JSON?, topics: [Topic])
    /// `auth` with a fresh `token`, before the connection's token expires.
    case auth(id: JSON?, token: String)
}

extension Codec {
    /// The longest token an `auth` op may carry: far above any JWT an identity provider issues.
    public static let maxTokenBytes = 8_192

    /// Decodes one WebSocket text frame. A topic list longer than `maxTopics` is `limit`; a topic that is not one of
    /// RollCall's (`presence/<user>/`, `presence/`, `group/<id>/`, `broker/`) is `bad_request`.
    public static func decodeGatewayRequest(
        _ body: [UInt8], limits: PresenceCore.Configuration = .init(), maxTopics: Int
    ) -> Result<GatewayRequest, RequestRejection> {
        let json: JSON
        do {
            json = try JSONParser.parse(body)
        } catch {
            return .failure(RequestRejection(id: nil, error: PresenceError(.badRequest, "body is not JSON: \(error)")))
        }
        guard case .object(let members) = json else {
            return .failure(
                RequestRejection(
                    id: nil, error: PresenceError(.badRequest, "body must be a JSON object, not \(json.typeName)")))
        }
        var id: JSON?
        if let raw = members[JSONKey("id")] {
            guard raw.isScalar else {
                return .failure(
                    RequestRejection(id: nil, error: PresenceError(.badRequest, "id must be a JSON scalar")))
            }
            id = raw
        }
        let fields = Fields(members)
        do throws(PresenceError) {
            switch try fields.string("op") {
            case "subscribe":
                return .success(
                    .subscribe(
                        id: id, topics: try topics(fields, max: maxTopics), after: try fields.offset("after"),
                        logEpoch: try fields.string("log_epoch")))
            case "unsubscribe": return .success(.unsubscribe(id: id, topics: try topics(fields, max: maxTopics)))
            case "auth":
                guard let token = try fields.string("token") else {
                    throw PresenceError(.badRequest, "field 'token' is required")
                }
                guard token.utf8.count <= maxTokenBytes else {
                    throw PresenceError(.tooLarge, "token of \(token.utf8.count) bytes; at most \(maxTokenBytes)")
                }
                return .success(.auth(id: id, token: token))
            default:
                return .success(.request(RequestEnvelope(id: id, request: try decodeRequest(fields, limits: limits))))
            }
        } catch {
            return .failure(RequestRejection(id: id, error: error))
        }
    }

    private static func topics(_ fields: Fields, max: Int) throws(PresenceError) -> [Topic] {
        guard let value = fields["topics"] else { throw PresenceError(.badRequest, "field 'topics' is required") }
        guard case .array(let elements) = value else {
            throw PresenceError(.badRequest, "field 'topics' must be an array of strings, not \(value.typeName)")
        }
        guard elements.count <= max else {
            throw PresenceError(.limit, "a request names at most \(max) topics, not \(elements.count)")
        }
        var topics: [Topic] = []
        for element in elements {
            guard let text = element.string else {
                throw PresenceError(.badRequest, "field 'topics' must hold strings, not \(element.typeName)")
            }
            guard let topic = Topic(subscription: text.utf8) else {
                throw PresenceError(
                    .badRequest,
                    "unknown topic \(quoted(text)): presence/<user>/, presence/, group/<id>/ or broker/")
            }
            topics.append(topic)
        }
        return topics
    }

    /// Reads `keepalive` of a `hello`: `ttl` (the default) or `connection`.
    static func keepAlive(_ fields: Fields) throws(PresenceError) -> PresenceCore.KeepAlive {
        guard let text = try fields.string("keepalive") else { return .requests }
        guard let keepAlive = PresenceCore.KeepAlive(rawValue: text) else {
            throw PresenceError(.badRequest, "field 'keepalive' must be ttl or connection, not \(quoted(text))")
        }
        return keepAlive
    }

    /// One update for a WebSocket subscriber: `{"topic":"<topic>","message":<body>}`, where `body` is exactly the
    /// message the update socket carries on that topic (a record, a group message or a broker heartbeat).
    public static func encodeUpdate(topic: [UInt8], body: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(topic.count + body.count + 24)
        bytes.append(contentsOf: #"{"topic":""#.utf8)
        bytes.append(contentsOf: topic)  // topics are ASCII without quotes or backslashes (the id rules)
        bytes.append(contentsOf: #"","message":"#.utf8)
        bytes.append(contentsOf: body)
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    /// The reply to `subscribe`, `unsubscribe` or `auth`: `{"ok":true,"id":...}` and, for `auth`, the new token's
    /// expiry in seconds since the epoch.
    public static func encodeGatewayReply(id: JSON?, expires: Int64? = nil) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("ok")
        writer.bool(true)
        if let id {
            writer.key("id")
            writer.value(id)
        }
        if let expires {
            writer.key("expires")
            writer.integer(expires)
        }
        writer.endObject()
        return writer.bytes
    }
}
