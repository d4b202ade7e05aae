import RollCallCore

extension Codec {
    /// Encodes the reply to a request whose `id` was `id`.
    public static func encodeReply(id: JSON?, _ result: Result<Reply, PresenceError>) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("ok")
        switch result {
        case .failure(let error):
            writer.bool(false)
            writeID(id, into: &writer)
            writer.key("error")
            writer.beginObject()
            writer.key("code")
            writer.string(error.code.rawValue)
            writer.key("message")
            writer.string(error.message)
            writer.endObject()
        case .success(let reply):
            writer.bool(true)
            writeID(id, into: &writer)
            write(reply, into: &writer)
        }
        writer.endObject()
        return writer.bytes
    }

    private static func writeID(_ id: JSON?, into writer: inout JSONWriter) {
        guard let id else { return }
        writer.key("id")
        writer.value(id)
    }

    private static func write(_ reply: Reply, into writer: inout JSONWriter) {
        switch reply {
        case .done:
            break
        case .hello(let granted):
            writer.key("session")
            writer.string(granted.session.rawValue)
            writer.key("heartbeat_ms")
            writer.integer(granted.heartbeatMilliseconds)
            writer.key("ttl_ms")
            writer.integer(granted.ttlMilliseconds)
        case .query(let records):
            writer.key("presence")
            writer.beginObject()
            for record in records {
                writer.key(record.user.rawValue)
                write(record, into: &writer)
            }
            writer.endObject()
        case .ping(let info):
            writer.key("broker")
            writer.string(info.broker)
            writer.key("version")
            writer.string(info.version)
            writer.key("epoch")
            writer.string(info.epoch)
            writer.key("time")
            writer.integer(info.time.milliseconds)
        }
    }

    /// Encodes a presence record, the body of a `presence/<user>/` message.
    public static func encodeRecord(_ record: PresenceRecord) -> [UInt8] {
        var writer = JSONWriter(capacity: 160)
        write(record, into: &writer)
        return writer.bytes
    }

    static func write(_ record: PresenceRecord, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("user")
        writer.string(record.user.rawValue)
        writer.key("status")
        writer.string(record.status.rawValue)
        if let text = record.text {
            writer.key("text")
            writer.string(text)
        }
        writer.key("since")
        if let since = record.since { writer.integer(since.milliseconds) } else { writer.null() }
        writer.key("last_seen")
        if let lastSeen = record.lastSeen { writer.integer(lastSeen.milliseconds) } else { writer.null() }
        writer.key("sessions")
        writer.integer(record.sessions)
        writer.key("seq")
        writer.integer(record.seq)
        if let reason = record.reason {
            writer.key("reason")
            writer.string(reason.rawValue)
        }
        writer.endObject()
    }
}
