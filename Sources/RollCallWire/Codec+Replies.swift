import RollCallCore

extension Codec {
    /// Room kept at the end of a paged reply for `next`, `seq` and the closing braces.
    static let pageTrailerBytes = 256

    /// Encodes the reply to a request whose `id` was `id`.
    ///
    /// `query` and `group` replies are paged to `maxBytes`: records are written while the reply stays within it,
    /// and `next` says where the rest starts (docs/protocol.md §6.5, §6.7). At least one record is always written,
    /// so a reply exceeds `maxBytes` only when the echoed `id` alone nearly fills it, and then by one record.
    public static func encodeReply(
        id: JSON?, _ result: Result<Reply, PresenceError>, maxBytes: Int = .max
    ) -> [UInt8] {
        let budget = maxBytes == .max ? Int.max : maxBytes - pageTrailerBytes
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
            write(reply, into: &writer, budget: budget)
        }
        writer.endObject()
        return writer.bytes
    }

    private static func writeID(_ id: JSON?, into writer: inout JSONWriter) {
        guard let id else { return }
        writer.key("id")
        writer.value(id)
    }

    private static func write(_ reply: Reply, into writer: inout JSONWriter, budget: Int) {
        switch reply {
        case .done:
            break
        case .held:
            writer.key("held")
            writer.bool(true)
        case .hello(let granted):
            writer.key("session")
            writer.string(granted.session.rawValue)
            writer.key("heartbeat_ms")
            writer.integer(granted.heartbeatMilliseconds)
            writer.key("ttl_ms")
            writer.integer(granted.ttlMilliseconds)
        case .query(let records, let positions):
            writer.key("presence")
            let written = writeByUser(records, into: &writer, budget: budget)
            if written < records.count {
                writer.key("next")
                writer.integer(positions.isEmpty ? written : positions[written])
            }
        case .ping(let info):
            write(info, into: &writer)
        case .advanced(let time):
            writer.key("time")
            writer.integer(time.milliseconds)
        case .group(let snapshot):
            writeAggregate(group: snapshot.group, counts: snapshot.counts, into: &writer)
            writer.key("members")
            let written = writeByUser(snapshot.members, into: &writer, budget: budget)
            if let next = written < snapshot.members.count ? snapshot.members[written - 1].user : snapshot.next {
                writer.key("next")
                writer.string(next.rawValue)
            }
            writer.key("seq")
            writer.integer(snapshot.seq)
        case .ungroup(let deleted):
            writer.key("deleted")
            writer.bool(deleted)
        case .log(let page):
            write(page, into: &writer, budget: budget)
        case .privacy(let policy):
            writer.key("visibility")
            writer.string(policy.visibility.rawValue)
            writer.key("last_seen")
            writer.string(policy.lastSeen.rawValue)
        case .listCount(let name, let count):
            writer.key(name)
            writer.integer(count)
        }
    }

    /// A page of the log: `[{offset, time, record}]` while within `budget` (at least one), `next` when more may
    /// follow, and the log's position.
    private static func write(_ page: LogPage, into writer: inout JSONWriter, budget: Int) {
        writer.key(page.name)
        writer.beginArray()
        var written = 0
        for entry in page.entries {
            if written > 0 && writer.bytes.count >= budget { break }
            writer.beginObject()
            writer.key("offset")
            writer.integer(entry.offset)
            writer.key("time")
            writer.integer(entry.time.milliseconds)
            writer.key("record")
            write(entry.record, into: &writer)
            writer.endObject()
            written += 1
        }
        writer.endArray()
        if let next = written < page.entries.count ? page.entries[written - 1].offset : page.next {
            writer.key("next")
            writer.integer(next)
        }
        writeLogPosition(page.position, into: &writer)
    }

    /// `"offset"` and `"log_epoch"`.
    private static func writeLogPosition(_ position: LogPosition, into writer: inout JSONWriter) {
        writer.key("offset")
        writer.integer(position.offset)
        writer.key("log_epoch")
        writer.string(position.epoch)
    }

    /// The broker's identity as one JSON object, as `ping` answers it and `rollcall ping` prints it.
    public static func encodeBrokerInfo(_ info: BrokerInfo) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        write(info, into: &writer)
        writer.endObject()
        return writer.bytes
    }

    private static func write(_ info: BrokerInfo, into writer: inout JSONWriter) {
        writer.key("broker")
        writer.string(info.broker)
        writer.key("version")
        writer.string(info.version)
        writer.key("epoch")
        writer.string(info.epoch)
        writer.key("time")
        writer.integer(info.time.milliseconds)
        if info.testMode {
            writer.key("test_mode")
            writer.bool(true)
        }
        if let cluster = info.cluster { write(cluster, into: &writer) }
        if let log = info.log { writeLogPosition(log, into: &writer) }
    }

    /// `"node"` and `"cluster"`, as `ping` and the broker heartbeat carry them.
    static func write(_ cluster: ClusterStanding, into writer: inout JSONWriter) {
        writer.key("node")
        writer.string(cluster.node)
        writer.key("cluster")
        writer.string(cluster.state.rawValue)
    }

    /// `"node"` and `"cluster"`, if both are there and known.
    static func decodeClusterStanding(_ fields: [JSONKey: JSON]) -> ClusterStanding? {
        guard let node = fields["node"]?.string,
            let state = fields["cluster"]?.string.flatMap(ClusterStanding.State.init)
        else { return nil }
        return ClusterStanding(node: node, state: state)
    }

    /// Writes records as one object keyed by user id, while the output stays within `budget` bytes (at least one
    /// record); returns how many were written.
    private static func writeByUser(
        _ records: [PresenceRecord], into writer: inout JSONWriter, budget: Int = .max
    ) -> Int {
        writer.beginObject()
        var written = 0
        for record in records {
            let mark = writer.mark
            writer.key(record.user.rawValue)
            write(record, into: &writer)
            if writer.bytes.count > budget && written > 0 {
                writer.rewind(to: mark)
                break
            }
            written += 1
        }
        writer.endObject()
        return written
    }

    /// Encodes a group message, the body of a `group/<id>/` message.
    public static func encodeGroupUpdate(_ update: GroupUpdate) -> [UInt8] {
        var cache: [UserID: [UInt8]] = [:]
        return encodeGroupUpdate(update, recordCache: &cache)
    }

    /// Encodes a group message, taking each member's record from `recordCache` when it is there and adding it
    /// when not. Records made at one instant are the same in every group, so a flush of many overlapping groups
    /// encodes each changed member once.
    public static func encodeGroupUpdate(_ update: GroupUpdate, recordCache: inout [UserID: [UInt8]]) -> [UInt8] {
        var writer = JSONWriter(capacity: 128 + 160 * update.changed.count)
        writer.beginObject()
        if update.deleted {
            writer.key("group")
            writer.string(update.group.rawValue)
            writer.key("deleted")
            writer.bool(true)
        } else {
            writeAggregate(group: update.group, counts: update.counts, into: &writer)
            writer.key("changed")
            writer.beginArray()
            for record in update.changed {
                if let cached = recordCache[record.user] {
                    writer.raw(cached)
                } else {
                    let encoded = encodeRecord(record)
                    recordCache[record.user] = encoded
                    writer.raw(encoded)
                }
            }
            writer.endArray()
            writer.key("removed")
            writer.beginArray()
            for user in update.removed { writer.string(user.rawValue) }
            writer.endArray()
        }
        writer.key("seq")
        writer.integer(update.seq)
        writer.endObject()
        return writer.bytes
    }

    /// Splits a group message whose body would be larger than `maxBytes` into parts that each fit: every part has
    /// the aggregate, and the changes are shared out among them in order (`changed` first, then `removed`). A
    /// message that fits, and a deletion, come back as they are. The caller gives each later part a larger seq.
    public static func splitGroupUpdate(
        _ update: GroupUpdate, recordCache: inout [UserID: [UInt8]], maxBytes: Int
    ) -> [GroupUpdate] {
        guard !update.deleted, update.changed.count + update.removed.count > 1 else { return [update] }
        var empty = update
        empty.changed = []
        empty.removed = []
        let base = encodeGroupUpdate(empty).count
        var parts: [GroupUpdate] = []
        var part = empty
        var size = base
        func add(_ itemBytes: Int) {
            // An item goes into the current part unless that would make it too large; a part holds at least one.
            if size + itemBytes > maxBytes && size > base {
                parts.append(part)
                part = empty
                size = base
            }
            size += itemBytes
        }
        for record in update.changed {
            let encoded: [UInt8]
            if let cached = recordCache[record.user] {
                encoded = cached
            } else {
                encoded = encodeRecord(record)
                recordCache[record.user] = encoded
            }
            add(encoded.count + 1)
            part.changed.append(record)
        }
        for user in update.removed {
            add(user.rawValue.utf8.count + 3)  // user ids need no escaping: quotes and a comma
            part.removed.append(user)
        }
        parts.append(part)
        return parts
    }

    private static func writeAggregate(group: GroupID, counts: StatusCounts, into writer: inout JSONWriter) {
        writer.key("group")
        writer.string(group.rawValue)
        writer.key("online")
        writer.integer(counts.available)
        writer.key("total")
        writer.integer(counts.total)
        writer.key("counts")
        writer.beginObject()
        for status in Status.published {
            writer.key(status.rawValue)
            writer.integer(counts[status])
        }
        writer.endObject()
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
        if let offset = record.offset {
            writer.key("offset")
            writer.integer(offset)
        }
        writer.endObject()
    }
}
