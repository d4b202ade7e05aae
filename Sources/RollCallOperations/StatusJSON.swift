import RollCallBroker
import RollCallCore
import RollCallWire

/// The status page's JSON, written with the protocol's own writer; records are exactly as on the update socket.
enum StatusJSON {
    static func encode(_ status: BrokerStatus) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("broker")
        writer.string(status.broker)
        writer.key("epoch")
        writer.string(status.epoch)
        writer.key("time")
        writer.integer(status.time.milliseconds)
        for (key, value) in [
            ("sessions", status.sessions), ("users_available", status.usersAvailable),
            ("connections", status.connections), ("groups", status.groups), ("subscriptions", status.subscriptions),
        ] {
            writer.key(key)
            writer.integer(Int64(value))
        }
        writer.key("published")
        writer.integer(status.published)
        writer.key("recent")
        writer.beginArray()
        for record in status.recent { writer.raw(Codec.encodeRecord(record)) }
        writer.endArray()
        writer.endObject()
        return writer.bytes
    }

    static func encode(_ view: UserView) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("record")
        writer.raw(Codec.encodeRecord(view.record))
        writer.key("groups")
        writer.beginArray()
        for group in view.groups { writer.string(group.rawValue) }
        writer.endArray()
        writer.endObject()
        return writer.bytes
    }
}
