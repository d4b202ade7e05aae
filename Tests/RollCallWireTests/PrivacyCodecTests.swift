import RollCallCore
import RollCallWire
import Testing

@Suite("Privacy codec")
struct PrivacyCodecTests {
    func decode(_ text: String) -> Result<Request, PresenceError> {
        Codec.decodeRequest(Array(text.utf8)).map(\.request).mapError(\.error)
    }

    /// `privacy`, `contacts` and `block` decode with their fields, and encode back to the same requests.
    @Test func decodesAndEncodes() throws {
        let requests: [(String, Request)] = [
            (#"{"op":"privacy","user":"alice"}"#, .privacy(user: "alice".id, visibility: nil, lastSeen: nil)),
            (
                #"{"op":"privacy","user":"alice","visibility":"contacts","last_seen":"nobody"}"#,
                .privacy(user: "alice".id, visibility: .contacts, lastSeen: .nobody)
            ),
            (#"{"op":"contacts","user":"alice","set":["bob"]}"#, .contacts(user: "alice".id, .set(["bob".id]))),
            (#"{"op":"contacts","user":"alice","add":[]}"#, .contacts(user: "alice".id, .add([]))),
            (
                #"{"op":"contacts","user":"alice","remove":["b","c"]}"#,
                .contacts(user: "alice".id, .remove(["b".id, "c".id]))
            ),
            (#"{"op":"block","user":"alice","add":["bob"]}"#, .block(user: "alice".id, .add(["bob".id]))),
            (
                #"{"op":"block","user":"alice","remove":["bob"],"set":null}"#,
                .block(user: "alice".id, .remove(["bob".id]))
            ),
        ]
        for (text, request) in requests {
            #expect(try decode(text).get() == request, "\(text)")
            #expect(try decode(String(decoding: Codec.encodeRequest(request), as: UTF8.self)).get() == request)
        }
    }

    /// Each malformed request is refused with the documented code.
    @Test(arguments: [
        (#"{"op":"privacy"}"#, ErrorCode.badRequest),
        (#"{"op":"privacy","user":"no way"}"#, .badUser),
        (#"{"op":"privacy","user":"a","visibility":"friends"}"#, .badRequest),
        (#"{"op":"privacy","user":"a","last_seen":true}"#, .badRequest),
        (#"{"op":"contacts","user":"a"}"#, .badRequest),
        (#"{"op":"contacts","user":"a","set":["b"],"remove":["c"]}"#, .badRequest),
        (#"{"op":"contacts","user":"a","add":"b"}"#, .badRequest),
        (#"{"op":"contacts","user":"a","add":[1]}"#, .badRequest),
        (#"{"op":"contacts","user":"a","add":["b c"]}"#, .badUser),
        (#"{"op":"block","user":"a","set":["b"]}"#, .badRequest),
        (#"{"op":"block","user":"a","add":["b"],"remove":["c"]}"#, .badRequest),
        (#"{"op":"block","user":"a"}"#, .badRequest),
    ])
    func refuses(text: String, code: ErrorCode) {
        #expect(decode(text).error?.code == code)
    }

    /// A list longer than `--max-contacts` is `limit`, checked before its entries are read.
    @Test func longListIsLimit() {
        var limits = PresenceCore.Configuration()
        limits.maxContacts = 2
        let result = Codec.decodeRequest(Array(#"{"op":"contacts","user":"a","add":["b","c",7]}"#.utf8), limits: limits)
        #expect(result.map(\.request).mapError(\.error).error?.code == .limit)
    }

    /// The replies carry the policy and the counts.
    @Test func encodesReplies() {
        let policy = Codec.encodeReply(
            id: nil, .success(.privacy(PrivacyPolicy(visibility: .nobody, lastSeen: .contacts))))
        #expect(String(decoding: policy, as: UTF8.self) == #"{"ok":true,"visibility":"nobody","last_seen":"contacts"}"#)
        let count = Codec.encodeReply(id: nil, .success(.listCount(name: "blocks", count: 3)))
        #expect(String(decoding: count, as: UTF8.self) == #"{"ok":true,"blocks":3}"#)
    }
}

/// Topics as a subscriber reads them (protocol §8.2): which user's or group's, and for whom.
@Suite("Received topics and their audience")
struct ReceivedTopicTests {
    @Test func readsTheThreeForms() {
        let alice = Topic.presence("alice".id)
        #expect(ReceivedTopic(alice.bytes) == ReceivedTopic(topic: alice, audience: .truth))
        #expect(ReceivedTopic(alice.forEveryone) == ReceivedTopic(topic: alice, audience: .everyone))
        #expect(ReceivedTopic(alice.copy(for: "bob".id)) == ReceivedTopic(topic: alice, audience: .viewer("bob".id)))
        #expect(Array("presence/alice/bob/".utf8) == alice.copy(for: "bob".id))
        let team = Topic.group(GroupID(validating: "team")!)
        #expect(ReceivedTopic(Array("group/team/*/".utf8)) == ReceivedTopic(topic: team, audience: .everyone))
        #expect(ReceivedTopic(team.copy(for: "bob".id)) == ReceivedTopic(topic: team, audience: .viewer("bob".id)))
        #expect(ReceivedTopic(Topic.broker.bytes) == ReceivedTopic(topic: .broker, audience: .truth))
        for other in ["presence/", "presence/alice", "presence/alice//", "presence/a/b/c/", "presence/a%/", "x/a/"] {
            #expect(ReceivedTopic(Array(other.utf8)) == nil, "\(other)")
        }
    }

    /// A viewer's copy is for that viewer only; the truth and the messages for everyone are for all who receive them.
    @Test func aCopyIsForItsViewerOnly() throws {
        let copy = try #require(ReceivedTopic(Topic.presence("alice".id).copy(for: "bob".id)))
        #expect(copy.isFor("bob".id) && !copy.isFor("zoe".id) && !copy.isFor(nil))
        for topic in [Topic.presence("alice".id).bytes, Topic.presence("alice".id).forEveryone] {
            let read = try #require(ReceivedTopic(topic))
            #expect(read.isFor("bob".id) && read.isFor(nil))
        }
    }
}
