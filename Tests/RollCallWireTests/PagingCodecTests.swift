import RollCallCore
import RollCallWire
import Testing

@Suite("Paged replies")
struct PagingCodecTests {
    static func record(_ user: String, text: String? = nil) -> PresenceRecord {
        PresenceRecord(
            user: UserID(validating: user)!, status: .online, text: text, since: BrokerTime(milliseconds: 1),
            lastSeen: BrokerTime(milliseconds: 2), sessions: 1, seq: 3, reason: nil)
    }

    /// A query reply longer than the limit stops at a record that fits and gives the request index to resume from.
    @Test func queryReplyIsCutWithNext() throws {
        let records = (0..<100).map { Self.record("u\($0)", text: String(repeating: "x", count: 200)) }
        let positions = (0..<100).map { $0 * 2 }  // every user named twice
        let bytes = Codec.encodeReply(id: nil, .success(.query(records, positions: positions)), maxBytes: 4_096)
        #expect(bytes.count <= 4_096)
        let fields = try Codec.decodeReply(bytes).result.get()
        let answered = try Codec.decodeQuery(fields)
        let next = try #require(try Codec.decodeQueryNext(fields))
        #expect(answered.count > 0 && answered.count < 100)
        #expect(next == positions[answered.count])
    }

    /// A group page cut by size names its last member as `next`; one that fits keeps the core's `next`.
    @Test func groupReplyIsCutWithNext() throws {
        let members = (0..<100).map { Self.record("u" + String(1_000 + $0)) }
        let snapshot = GroupSnapshot(
            group: GroupID(validating: "g")!, counts: StatusCounts(online: 100), members: members, seq: 9)
        let cut = try Codec.decodeGroupSnapshot(
            Codec.decodeReply(Codec.encodeReply(id: .number("1"), .success(.group(snapshot)), maxBytes: 4_096))
                .result.get())
        #expect(cut.members.count < 100)
        #expect(cut.next == cut.members.last?.user)
        var whole = snapshot
        whole.next = UserID(validating: "u1099")
        let uncut = try Codec.decodeGroupSnapshot(
            Codec.decodeReply(Codec.encodeReply(id: nil, .success(.group(whole)))).result.get())
        #expect(uncut.members.count == 100)
        #expect(uncut.next == whole.next)
    }

    /// `after` is read from a group request, and must be a valid user id.
    @Test func groupRequestTakesAfter() throws {
        let request = try Codec.decodeRequest(Array(#"{"op":"group","group":"g","after":"u1"}"#.utf8)).get()
        #expect(request.request == .group(GroupID(validating: "g")!, GroupEdit(), after: UserID(validating: "u1")))
        let bad = Codec.decodeRequest(Array(#"{"op":"group","group":"g","after":"no spaces"}"#.utf8))
        #expect(throws: RequestRejection.self) { try bad.get() }
    }
}
