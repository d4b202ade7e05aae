import RollCallBroker
import RollCallCore
import RollCallWire

/// The status page's JSON, written with the protocol's own writer; records are exactly as on the update socket.
enum StatusJSON {
    static func encode(_ status: BrokerStatus, webhooks: [WebhookRow] = []) -> [UInt8] {
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
        writer.key("webhooks")
        writer.beginArray()
        for row in webhooks { encode(row, into: &writer) }
        writer.endArray()
        writer.endObject()
        return writer.bytes
    }

    private static func encode(_ row: WebhookRow, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("url")
        writer.string(row.url)
        writer.key("type")
        writer.string(row.type)
        writer.key("acknowledged")
        writer.integer(Int64(row.acknowledged))
        for (key, value) in [
            ("pending", row.pending), ("delivered_batches", row.deliveredBatches),
            ("skipped_batches", row.skippedBatches), ("trimmed_gaps", row.trimmedGaps), ("failures", row.failures),
        ] {
            writer.key(key)
            writer.integer(Int64(value))
        }
        writer.key("last_error")
        if let error = row.lastError { writer.string(error) } else { writer.null() }
        writer.key("delivering")
        writer.bool(row.delivering)
        writer.key("holder")
        if let holder = row.holder { writer.string(holder) } else { writer.null() }
        writer.endObject()
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
