import RollCallCore
import RollCallWire
import Testing

@Suite("Split group messages and the heartbeat's dropped")
struct PublishingCodecTests {
    func update(members: Int, removed: Int) -> GroupUpdate {
        let changed = (0..<members).map { index in
            PresenceRecord(
                user: "member-\(index)".id, status: .online, text: String(repeating: "t", count: index % 200),
                since: BrokerTime(milliseconds: 1), lastSeen: BrokerTime(milliseconds: 2), sessions: 1, seq: 9)
        }
        return GroupUpdate(
            group: GroupID(validating: "g")!, counts: StatusCounts(online: members), changed: changed,
            removed: (0..<removed).map { "gone-\($0)".id }, seq: 42)
    }

    /// A message larger than the cap is split into parts that each fit, carry the aggregate, and together list
    /// every change once, in order; a message that fits, and a deletion, stay whole.
    @Test(arguments: [(1, 0), (40, 0), (1_000, 0), (1_000, 3_000), (0, 5_000)])
    func splitsLargeGroupMessages(members: Int, removed: Int) throws {
        let whole = update(members: members, removed: removed)
        var cache: [UserID: [UInt8]] = [:]
        let parts = Codec.splitGroupUpdate(whole, recordCache: &cache, maxBytes: 16_384)
        let sizes = parts.map { Codec.encodeGroupUpdate($0).count }
        print("split: \(members) changed and \(removed) removed in \(parts.count) parts, largest \(sizes.max() ?? 0)")
        #expect(sizes.allSatisfy { $0 <= 16_384 })
        #expect(parts.flatMap(\.changed) == whole.changed)
        #expect(parts.flatMap(\.removed) == whole.removed)
        #expect(parts.allSatisfy { $0.counts == whole.counts && $0.group == whole.group && !$0.deleted })
        if Codec.encodeGroupUpdate(whole).count <= 16_384 { #expect(parts == [whole]) }
        var deletion = whole
        deletion.deleted = true
        #expect(Codec.splitGroupUpdate(deletion, recordCache: &cache, maxBytes: 100) == [deletion])
    }

    /// The heartbeat carries dropped; one without it (an older broker) reads as 0.
    @Test func heartbeatDropped() throws {
        let heartbeat = BrokerHeartbeat(
            broker: "b", epoch: "e", time: BrokerTime(milliseconds: 5), intervalMilliseconds: 1_000,
            usersAvailable: 1, sessions: 2, dropped: 17)
        let bytes = Codec.encodeBrokerHeartbeat(heartbeat)
        #expect(String(decoding: bytes, as: UTF8.self).hasSuffix(#""sessions":2,"dropped":17}"#))
        #expect(try Codec.decodeBrokerHeartbeat(bytes) == heartbeat)
        let old = #"{"broker":"b","epoch":"e","time":5,"heartbeat_ms":1000,"users_available":1,"sessions":2}"#
        #expect(try Codec.decodeBrokerHeartbeat(Array(old.utf8)).dropped == 0)
    }
}
