import RollCallCore

/// The client's side of the codec: encoding requests, reading replies and records.
extension Codec {
    /// Encodes a request with an optional `id`.
    public static func encodeRequest(_ request: Request, id: JSON? = nil) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("op")
        writer.string(request.op)
        if let id {
            writer.key("id")
            writer.value(id)
        }
        switch request {
        case .hello(let hello):
            writer.key("user")
            writer.string(hello.user.rawValue)
            if let device = hello.device {
                writer.key("device")
                writer.string(device)
            }
            writer.key("status")
            writer.string(hello.status.rawValue)
            if let text = hello.text {
                writer.key("text")
                writer.string(text)
            }
            if let ttl = hello.ttlMilliseconds {
                writer.key("ttl_ms")
                writer.integer(ttl)
            }
            if hello.keepAlive != .requests {
                writer.key("keepalive")
                writer.string(hello.keepAlive.rawValue)
            }
        case .heartbeat(let session), .bye(let session):
            writer.key("session")
            writer.string(session.rawValue)
        case .status(let session, let status, let text, let after):
            writer.key("session")
            writer.string(session.rawValue)
            writer.key("status")
            writer.string(status.rawValue)
            if let text {
                writer.key("text")
                writer.string(text)
            }
            if let after {
                writer.key("after_ms")
                writer.integer(after)
            }
        case .query(let users):
            writer.key("users")
            writer.beginArray()
            for user in users { writer.string(user.rawValue) }
            writer.endArray()
        case .ping:
            break
        case .group(let group, let edit, let after):
            writer.key("group")
            writer.string(group.rawValue)
            if let after {
                writer.key("after")
                writer.string(after.rawValue)
            }
            for (name, list) in [("members", edit.members), ("add", edit.add), ("remove", edit.remove)] {
                guard let list, !(list.isEmpty && name != "members") else { continue }
                writer.key(name)
                writer.beginArray()
                for user in list { writer.string(user.rawValue) }
                writer.endArray()
            }
        case .ungroup(let group):
            writer.key("group")
            writer.string(group.rawValue)
        case .advance(let milliseconds):
            writer.key("ms")
            writer.integer(milliseconds)
        case .queryAt(let users, let at):
            writer.key("users")
            writer.beginArray()
            for user in users { writer.string(user.rawValue) }
            writer.endArray()
            writer.key("at")
            writer.integer(at.milliseconds)
        case .history(let query):
            writer.key("user")
            writer.string(query.user.rawValue)
            for (name, value) in [("from", query.from?.milliseconds), ("to", query.to?.milliseconds)] {
                guard let value else { continue }
                writer.key(name)
                writer.integer(value)
            }
            if let after = query.after {
                writer.key("after")
                writer.integer(after)
            }
            writer.key("limit")
            writer.integer(query.limit)
        case .events(let after, let epoch, let limit):
            writer.key("after")
            writer.integer(after)
            if let epoch {
                writer.key("log_epoch")
                writer.string(epoch)
            }
            writer.key("limit")
            writer.integer(limit)
        case .privacy(let user, let visibility, let lastSeen):
            writer.key("user")
            writer.string(user.rawValue)
            for (name, value) in [("visibility", visibility), ("last_seen", lastSeen)] {
                guard let value else { continue }
                writer.key(name)
                writer.string(value.rawValue)
            }
        case .contacts(let user, let edit), .block(let user, let edit):
            writer.key("user")
            writer.string(user.rawValue)
            let (verb, list): (String, [UserID]) =
                switch edit {
                case .set(let names): ("set", names)
                case .add(let names): ("add", names)
                case .remove(let names): ("remove", names)
                }
            writer.key(verb)
            writer.beginArray()
            for name in list { writer.string(name.rawValue) }
            writer.endArray()
        }
        writer.endObject()
        return writer.bytes
    }

    /// A reply as a client reads it: the echoed id, and the fields or the error.
    public struct ReplyBody: Sendable, Equatable {
        public var id: JSON?
        public var result: Result<[JSONKey: JSON], PresenceError>
    }

    /// A reply or record that does not follow the protocol.
    public struct MalformedMessage: Error, Equatable, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Reads a reply body.
    public static func decodeReply(_ bytes: [UInt8]) throws -> ReplyBody {
        guard case .object(let fields) = try JSONParser.parse(bytes), case .bool(let ok)? = fields["ok"] else {
            throw MalformedMessage(description: "a reply must be an object with a boolean 'ok'")
        }
        if ok { return ReplyBody(id: fields["id"], result: .success(fields)) }
        guard case .object(let error)? = fields["error"], let codeText = error["code"]?.string else {
            throw MalformedMessage(description: "an error reply must carry error.code")
        }
        let code = ErrorCode(rawValue: codeText) ?? .badRequest
        let message = error["message"]?.string ?? codeText
        return ReplyBody(id: fields["id"], result: .failure(PresenceError(code, message)))
    }

    /// Reads the fields of a `hello` reply.
    public static func decodeGranted(_ fields: [JSONKey: JSON]) throws -> PresenceCore.Granted {
        guard let session = fields["session"]?.string, let heartbeat = fields["heartbeat_ms"]?.integer,
            let ttl = fields["ttl_ms"]?.integer
        else { throw MalformedMessage(description: "a hello reply must carry session, heartbeat_ms and ttl_ms") }
        return PresenceCore.Granted(session: SessionID(session), heartbeatMilliseconds: heartbeat, ttlMilliseconds: ttl)
    }

    /// Reads the fields of a `ping` reply.
    public static func decodeBrokerInfo(_ fields: [JSONKey: JSON]) throws -> BrokerInfo {
        guard let broker = fields["broker"]?.string, let version = fields["version"]?.string,
            let epoch = fields["epoch"]?.string, let time = fields["time"]?.integer
        else { throw MalformedMessage(description: "a ping reply must carry broker, version, epoch and time") }
        return BrokerInfo(
            broker: broker, version: version, epoch: epoch, time: BrokerTime(milliseconds: time),
            testMode: fields["test_mode"] == .bool(true), cluster: decodeClusterStanding(fields),
            log: decodeLogPosition(fields))
    }

    /// `"offset"` and `"log_epoch"` of a `ping` reply or a log page, if both are there.
    public static func decodeLogPosition(_ fields: [JSONKey: JSON]) -> LogPosition? {
        guard let epoch = fields["log_epoch"]?.string, let offset = fields["offset"].flatMap(unsigned) else {
            return nil
        }
        return LogPosition(epoch: epoch, offset: offset)
    }

    /// Reads a `history` or `events` reply (`name` says which).
    public static func decodeLogPage(_ fields: [JSONKey: JSON], name: String) throws -> LogPage {
        guard case .array(let items)? = fields[JSONKey(name)], let position = decodeLogPosition(fields) else {
            throw MalformedMessage(description: "a \(name) reply must carry \(name), offset and log_epoch")
        }
        let entries = try items.map { (item) throws -> LogEntry in
            guard case .object(let entry) = item, let offset = entry["offset"].flatMap(unsigned),
                let time = entry["time"]?.integer, let record = entry["record"]
            else { throw MalformedMessage(description: "a log entry must carry offset, time and record") }
            return LogEntry(offset: offset, time: BrokerTime(milliseconds: time), record: try decodeRecord(record))
        }
        return LogPage(
            name: name, entries: entries, next: fields["next"].flatMap(unsigned), position: position)
    }

    /// Where a paged `query` reply stopped: the index in the request's `users` of the first user not answered, or
    /// nil when every user was.
    public static func decodeQueryNext(_ fields: [JSONKey: JSON]) throws -> Int? {
        guard let value = fields["next"] else { return nil }
        guard let next = value.integer, next > 0 else {
            throw MalformedMessage(description: "a query reply's 'next' must be a positive integer")
        }
        return Int(next)
    }

    /// Reads the records of a `query` reply, in no particular order.
    public static func decodeQuery(_ fields: [JSONKey: JSON]) throws -> [UserID: PresenceRecord] {
        guard case .object(let presence)? = fields["presence"] else {
            throw MalformedMessage(description: "a query reply must carry a 'presence' object")
        }
        var records: [UserID: PresenceRecord] = [:]
        for value in presence.values {
            let record = try decodeRecord(value)
            records[record.user] = record
        }
        return records
    }

    /// Reads a presence record, the body of a `presence/<user>/` message.
    public static func decodeRecord(_ bytes: [UInt8]) throws -> PresenceRecord {
        try decodeRecord(try JSONParser.parse(bytes))
    }

    public static func decodeRecord(_ json: JSON) throws -> PresenceRecord {
        guard case .object(let fields) = json, let userText = fields["user"]?.string,
            let user = UserID(validating: userText), let statusText = fields["status"]?.string,
            let status = Status(rawValue: statusText), let sessions = fields["sessions"]?.integer,
            let seqText = fields["seq"], case .number(let seqLiteral) = seqText, let seq = UInt64(seqLiteral)
        else { throw MalformedMessage(description: "a record must carry user, status, sessions and seq") }
        return PresenceRecord(
            user: user, status: status, text: fields["text"]?.string,
            since: fields["since"]?.integer.map(BrokerTime.init),
            lastSeen: fields["last_seen"]?.integer.map(BrokerTime.init),
            sessions: Int(sessions), seq: seq, reason: fields["reason"]?.string.flatMap(OfflineReason.init),
            offset: fields["offset"].flatMap(unsigned))
    }
}

extension Codec {
    /// Reads the fields of a `group` reply.
    public static func decodeGroupSnapshot(_ fields: [JSONKey: JSON]) throws -> GroupSnapshot {
        guard let group = fields["group"]?.string.flatMap(GroupID.init(validating:)),
            case .object(let members)? = fields["members"], let seq = fields["seq"].flatMap(unsigned)
        else { throw MalformedMessage(description: "a group reply must carry group, members and seq") }
        return GroupSnapshot(
            group: group, counts: try decodeCounts(fields["counts"]),
            members: try members.values.map(decodeRecord).sorted { $0.user < $1.user }, seq: seq,
            next: try fields["next"].map { (value) throws in
                guard let text = value.string, let user = UserID(validating: text) else {
                    throw MalformedMessage(description: "a group reply's 'next' must be a user id")
                }
                return user
            })
    }

    /// Reads a group message, the body of a `group/<id>/` message.
    public static func decodeGroupUpdate(_ bytes: [UInt8]) throws -> GroupUpdate {
        guard case .object(let fields) = try JSONParser.parse(bytes),
            let group = fields["group"]?.string.flatMap(GroupID.init(validating:)),
            let seq = fields["seq"].flatMap(unsigned)
        else { throw MalformedMessage(description: "a group message must carry group and seq") }
        if fields["deleted"] == .bool(true) {
            return GroupUpdate(group: group, counts: StatusCounts(), changed: [], removed: [], seq: seq, deleted: true)
        }
        guard case .array(let changed)? = fields["changed"], case .array(let removed)? = fields["removed"] else {
            throw MalformedMessage(description: "a group message must carry changed and removed")
        }
        return GroupUpdate(
            group: group, counts: try decodeCounts(fields["counts"]), changed: try changed.map(decodeRecord),
            removed: removed.compactMap { $0.string.flatMap(UserID.init(validating:)) }, seq: seq)
    }

    private static func decodeCounts(_ json: JSON?) throws -> StatusCounts {
        guard case .object(let fields)? = json else {
            throw MalformedMessage(description: "group counts must be an object")
        }
        var counts = StatusCounts()
        for status in Status.published { counts[status] = Int(fields[JSONKey(status.rawValue)]?.integer ?? 0) }
        return counts
    }

    private static func unsigned(_ json: JSON) -> UInt64? {
        guard case .number(let literal) = json else { return nil }
        return UInt64(literal)
    }
}
