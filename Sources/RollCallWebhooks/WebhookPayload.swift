import RollCallCore
import RollCallWire

/// The JSON bodies POSTed to a webhook URL (docs/webhooks.md). Records are written by the wire's own encoder, so
/// that they are byte for byte what subscribers receive.
public enum WebhookPayload {
    /// `{"type":"presence.changed","timestamp":<ms>,"data":{"events":[{"offset":…,"user":…,"record":{…}},…]}}`.
    ///
    /// `timestamp` is the broker time of the batch's newest transition, in Unix milliseconds: taken from the log,
    /// not from a clock, so that every retry of a batch, and a batch sent again after a restart, has the same bytes.
    public static func presenceChanged(_ entries: [LogEntry]) -> [UInt8] {
        var writer = JSONWriter(capacity: 64 + entries.count * 200)
        writer.beginObject()
        writer.key("type")
        writer.string("presence.changed")
        writer.key("timestamp")
        writer.integer(entries.last?.time.milliseconds ?? 0)
        writer.key("data")
        writer.beginObject()
        writer.key("events")
        writer.beginArray()
        for entry in entries {
            writer.beginObject()
            writer.key("offset")
            writer.integer(entry.offset)
            writer.key("user")
            writer.string(entry.record.user.rawValue)
            writer.key("record")
            writer.raw(Codec.encodeRecord(entry.record))
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        writer.endObject()
        return writer.bytes
    }

    /// `{"type":"presence.offline_for","timestamp":<t+N ms>,"data":{"offset":…,"user":…,"offline_ms":N,"record":{…}}}`
    /// for the offline record `entry` (made at broker time t) that stayed the user's latest for N ms. `offset` is the
    /// offline transition's, the receiver's idempotency key; `timestamp` is the broker time the N ms ran out.
    public static func offlineFor(_ entry: LogEntry, offlineMilliseconds: Int64) -> [UInt8] {
        var writer = JSONWriter(capacity: 300)
        writer.beginObject()
        writer.key("type")
        writer.string("presence.offline_for")
        writer.key("timestamp")
        writer.integer(entry.time.milliseconds + offlineMilliseconds)
        writer.key("data")
        writer.beginObject()
        writer.key("offset")
        writer.integer(entry.offset)
        writer.key("user")
        writer.string(entry.record.user.rawValue)
        writer.key("offline_ms")
        writer.integer(offlineMilliseconds)
        writer.key("record")
        writer.raw(Codec.encodeRecord(entry.record))
        writer.endObject()
        writer.endObject()
        return writer.bytes
    }
}
