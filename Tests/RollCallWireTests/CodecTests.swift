import RollCallCore
import RollCallWire
import Testing

@Suite("Request codec")
struct RequestCodecTests {
    func decode(_ text: String) -> Result<RequestEnvelope, RequestRejection> {
        Codec.decodeRequest(Array(text.utf8))
    }

    /// Every operation decodes with its fields, and the id is kept exactly as written.
    @Test func decodesOperations() throws {
        #expect(
            try decode(
                #"{"op":"hello","user":"alice","device":"phone","status":"busy","text":"hi","ttl_ms":5000,"id":7}"#
            )
            .get()
                == RequestEnvelope(
                    id: .number("7"),
                    request: .hello(
                        .init(user: "alice".id, device: "phone", status: .busy, text: "hi", ttlMilliseconds: 5000))))
        #expect(try decode(#"{"op":"hello","user":"bob"}"#).get().request == .hello(.init(user: "bob".id)))
        #expect(try decode(#"{"op":"heartbeat","session":"s1"}"#).get().request == .heartbeat(session: SessionID("s1")))
        #expect(
            try decode(#"{"op":"status","session":"s1","status":"away"}"#).get().request
                == .status(session: SessionID("s1"), status: .away, text: nil))
        #expect(
            try decode(#"{"op":"status","session":"s1","status":"offline","after_ms":5000}"#).get().request
                == .status(session: SessionID("s1"), status: .offline, text: nil, afterMilliseconds: 5_000))
        #expect(try decode(#"{"op":"bye","session":"s1","id":"x"}"#).get().id == .string("x"))
        #expect(try decode(#"{"op":"query","users":["a","b"]}"#).get().request == .query(users: ["a".id, "b".id]))
        #expect(try decode(#"{"op":"ping","id":1.50}"#).get() == RequestEnvelope(id: .number("1.50"), request: .ping))
        #expect(try decode(#"{"op":"ping","extra":{"ignored":[1]}}"#).get().request == .ping)
    }

    /// Each malformed request is rejected with the documented code, and the id echoed when it could be read.
    @Test(arguments: [
        ("not json", ErrorCode.badRequest, false),
        ("[1,2]", .badRequest, false),
        ("\"hello\"", .badRequest, false),
        (#"{"id":1}"#, .badRequest, true),
        (#"{"op":5,"id":1}"#, .badRequest, true),
        (#"{"op":"dance","id":1}"#, .unknownOp, true),
        (#"{"op":"status","session":"s","status":"away","after_ms":0,"id":1}"#, .badRequest, true),
        (#"{"op":"status","session":"s","status":"away","after_ms":600001,"id":1}"#, .badRequest, true),
        (#"{"op":"status","session":"s","status":"away","after_ms":"5000","id":1}"#, .badRequest, true),
        (#"{"op":"status","session":"s","status":"away","after_ms":5e3,"id":1}"#, .badRequest, true),
        (#"{"op":"hello","id":1}"#, .badRequest, true),
        (#"{"op":"hello","user":42,"id":1}"#, .badRequest, true),
        (#"{"op":"hello","user":"bad user","id":1}"#, .badUser, true),
        (#"{"op":"hello","user":"","id":1}"#, .badUser, true),
        (#"{"op":"hello","user":"a","status":"sleeping","id":1}"#, .badRequest, true),
        (#"{"op":"hello","user":"a","ttl_ms":"3000","id":1}"#, .badRequest, true),
        (#"{"op":"hello","user":"a","ttl_ms":3000.5,"id":1}"#, .badRequest, true),
        (#"{"op":"hello","user":"a","text":["x"],"id":1}"#, .badRequest, true),
        (#"{"op":"heartbeat","id":1}"#, .badRequest, true),
        (#"{"op":"heartbeat","session":12,"id":1}"#, .badRequest, true),
        (#"{"op":"status","session":"s","id":1}"#, .badRequest, true),
        (#"{"op":"query","id":1}"#, .badRequest, true),
        (#"{"op":"query","users":"alice","id":1}"#, .badRequest, true),
        (#"{"op":"query","users":["ok",7],"id":1}"#, .badRequest, true),
        (#"{"op":"query","users":["ok","no/slash"],"id":1}"#, .badUser, true),
        (#"{"op":"ping","id":{"nested":1}}"#, .badRequest, false),
    ])
    func rejects(_ text: String, code: ErrorCode, echoesID: Bool) {
        guard case .failure(let rejection) = decode(text) else {
            Issue.record("\(text) was accepted")
            return
        }
        #expect(rejection.error.code == code)
        #expect(!rejection.error.message.isEmpty)
        #expect((rejection.id != nil) == echoesID)
    }

    /// A query of more users than allowed is a limit error, checked before the ids are read.
    @Test func queryLimit() {
        let users = (0..<1_001).map { "\"u\($0)\"" }.joined(separator: ",")
        guard case .failure(let rejection) = decode(#"{"op":"query","users":[\#(users)]}"#) else {
            Issue.record("accepted")
            return
        }
        #expect(rejection.error.code == .limit)
    }

    /// Every truncation of a valid request is rejected, never crashes, and never decodes to another request.
    @Test func truncationsAreRejected() {
        let full = #"{"op":"status","session":"s-1","status":"busy","text":"é in a meeting","id":1}"#
        let bytes = Array(full.utf8)
        for length in 0..<bytes.count {
            if case .success = Codec.decodeRequest(Array(bytes[0..<length])) {
                Issue.record("a truncation to \(length) bytes was accepted")
            }
        }
        #expect((try? Codec.decodeRequest(bytes).get()) != nil)
    }

    /// Client-side encoding decodes back to the same request.
    @Test func requestsRoundTrip() throws {
        let requests: [Request] = [
            .hello(.init(user: "a".id, device: "d", status: .away, text: "t\"", ttlMilliseconds: 9)),
            .heartbeat(session: SessionID("s")), .status(session: SessionID("s"), status: .busy, text: nil),
            .bye(session: SessionID("s")), .query(users: ["x".id, "y".id]), .ping,
        ]
        for request in requests {
            #expect(
                try Codec.decodeRequest(Codec.encodeRequest(request, id: .number("3"))).get()
                    == RequestEnvelope(id: .number("3"), request: request))
        }
    }
}

@Suite("Reply and record codec")
struct ReplyCodecTests {
    let record = PresenceRecord(
        user: "alice".id, status: .away, text: "brb \"5\"", since: BrokerTime(milliseconds: 10),
        lastSeen: BrokerTime(milliseconds: 20), sessions: 2, seq: 1_700_000_000_000_001, reason: nil)

    /// A record encodes with every documented field and decodes back unchanged.
    @Test func recordRoundTrips() throws {
        let bytes = Codec.encodeRecord(record)
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == #"{"user":"alice","status":"away","text":"brb \"5\"","since":10,"last_seen":20,"sessions":2,"seq":1700000000000001}"#
        )
        #expect(try Codec.decodeRecord(bytes) == record)
        let unknown = Codec.encodeRecord(.unknown("bob".id))
        #expect(
            String(decoding: unknown, as: UTF8.self)
                == #"{"user":"bob","status":"offline","since":null,"last_seen":null,"sessions":0,"seq":0}"#)
        var offline = record
        offline.status = .offline
        offline.reason = .timeout
        #expect(try Codec.decodeRecord(Codec.encodeRecord(offline)).reason == .timeout)
    }

    /// Errors encode as ok:false with code and message, echoing the id as written.
    @Test func errorReply() throws {
        let bytes = Codec.encodeReply(id: .number("1e2"), .failure(PresenceError(.badUser, "no")))
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == #"{"ok":false,"id":1e2,"error":{"code":"bad_user","message":"no"}}"#)
        let body = try Codec.decodeReply(bytes)
        #expect(body.result == .failure(PresenceError(.badUser, "no")))
    }

    /// Success replies carry their fields and decode on the client side.
    @Test func successReplies() throws {
        let granted = PresenceCore.Granted(
            session: SessionID("s"), heartbeatMilliseconds: 1_000, ttlMilliseconds: 3_000)
        let hello = try Codec.decodeReply(Codec.encodeReply(id: nil, .success(.hello(granted))))
        #expect(try Codec.decodeGranted(hello.result.get()) == granted)
        let query = try Codec.decodeReply(Codec.encodeReply(id: .string("q"), .success(.query([record]))))
        #expect(query.id == .string("q"))
        #expect(try Codec.decodeQuery(query.result.get()) == ["alice".id: record])
        let info = BrokerInfo(broker: "b", version: "1", epoch: "e", time: BrokerTime(milliseconds: 5))
        let ping = try Codec.decodeReply(Codec.encodeReply(id: nil, .success(.ping(info))))
        #expect(try Codec.decodeBrokerInfo(ping.result.get()) == info)
        #expect(
            String(decoding: Codec.encodeReply(id: .bool(true), .success(.done)), as: UTF8.self)
                == #"{"ok":true,"id":true}"#)
        #expect(
            String(decoding: Codec.encodeReply(id: .number("2"), .success(.held)), as: UTF8.self)
                == #"{"ok":true,"id":2,"held":true}"#)
    }
}

@Suite("Topics")
struct TopicTests {
    /// Subscriptions name one user exactly, or all users; other prefixes are not topics.
    @Test func parsesSubscriptions() {
        #expect(Topic(subscription: Array("presence/alice/".utf8)) == .presence("alice".id))
        #expect(Topic(subscription: Array("presence/".utf8)) == .allPresence)
        #expect(Topic(subscription: Array("presence/al".utf8)) == nil)
        #expect(Topic(subscription: Array("presence/a b/".utf8)) == nil)
        #expect(Topic(subscription: Array("presence/a/b/".utf8)) == nil)
        #expect(Topic(subscription: Array("".utf8)) == nil)
        #expect(Topic(subscription: [0xFF]) == nil)
        #expect(Topic.presence("bob".id).text == "presence/bob/")
    }
}

extension String {
    var id: UserID { UserID(validating: self)! }
}

@Suite("Group codec")
struct GroupCodecTests {
    /// group and ungroup decode with their lists; bad ids, wrong types and oversized lists are rejected.
    @Test func decodesGroupRequests() throws {
        let decoded = try Codec.decodeRequest(
            Array(#"{"op":"group","group":"team-7","add":["a"],"remove":["b"]}"#.utf8)
        )
        .get()
        #expect(decoded.request == .group(GroupID(validating: "team-7")!, GroupEdit(add: ["a".id], remove: ["b".id])))
        #expect(
            try Codec.decodeRequest(Array(#"{"op":"ungroup","group":"g"}"#.utf8)).get().request
                == .ungroup(GroupID(validating: "g")!))
        var small = PresenceCore.Configuration()
        small.maxGroupSize = 2
        let cases: [(String, ErrorCode)] = [
            (#"{"op":"group"}"#, .badRequest),
            (#"{"op":"group","group":"no way"}"#, .badGroup),
            (#"{"op":"group","group":5}"#, .badRequest),
            (#"{"op":"group","group":"g","members":"a,b"}"#, .badRequest),
            (#"{"op":"group","group":"g","members":["a",1]}"#, .badRequest),
            (#"{"op":"group","group":"g","add":["bad id"]}"#, .badUser),
            (#"{"op":"group","group":"g","members":["a","b","c"]}"#, .limit),
            (#"{"op":"ungroup","group":""}"#, .badGroup),
        ]
        for (body, code) in cases {
            #expect(Codec.decodeRequest(Array(body.utf8), limits: small).error?.error.code == code, "\(body)")
        }
    }

    /// Group messages and snapshots encode every documented field and decode back.
    @Test func groupMessagesRoundTrip() throws {
        let record = PresenceRecord(
            user: "a".id, status: .online, since: BrokerTime(milliseconds: 1), lastSeen: BrokerTime(milliseconds: 2),
            sessions: 1, seq: 9)
        let update = GroupUpdate(
            group: GroupID(validating: "g")!, counts: StatusCounts(online: 1, away: 2, offline: 2), changed: [record],
            removed: ["b".id], seq: 42)
        let text = String(decoding: Codec.encodeGroupUpdate(update), as: UTF8.self)
        #expect(
            text.hasPrefix(
                #"{"group":"g","online":3,"total":5,"counts":{"online":1,"busy":0,"away":2,"offline":2},"changed":[{"user":"a""#
            ))
        #expect(text.hasSuffix(#""removed":["b"],"seq":42}"#))
        #expect(try Codec.decodeGroupUpdate(Codec.encodeGroupUpdate(update)) == update)
        var deleted = update
        deleted.deleted = true
        #expect(
            String(decoding: Codec.encodeGroupUpdate(deleted), as: UTF8.self)
                == #"{"group":"g","deleted":true,"seq":42}"#)
        let snapshot = GroupSnapshot(group: update.group, counts: update.counts, members: [record], seq: 7)
        let reply = try Codec.decodeReply(Codec.encodeReply(id: nil, .success(.group(snapshot))))
        #expect(try Codec.decodeGroupSnapshot(reply.result.get()) == snapshot)
        #expect(try reply.result.get()["total"]?.integer == 5)
    }

    /// Group topics end with a slash and name one group.
    @Test func groupTopics() {
        #expect(Topic(subscription: Array("group/team-7/".utf8)) == .group(GroupID(validating: "team-7")!))
        #expect(Topic(subscription: Array("group/team".utf8)) == nil)
        #expect(Topic(subscription: Array("group/".utf8)) == nil)
        #expect(Topic.group(GroupID(validating: "x")!).text == "group/x/")
    }
}

extension Result {
    var error: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
