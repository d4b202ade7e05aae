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

/// Presence topics as a subscriber reads them (protocol §8.2): whose records, and for whom.
@Suite("Presence topics and their audience")
struct PresenceTopicTests {
    @Test func readsTheThreeForms() {
        let truth = PresenceTopic(Array("presence/alice/".utf8))
        #expect(truth == PresenceTopic(user: "alice".id, audience: .truth))
        let everyone = PresenceTopic(Topic.presenceForEveryone("alice".id))
        #expect(everyone == PresenceTopic(user: "alice".id, audience: .everyone))
        let copy = PresenceTopic(Topic.presence("alice".id, viewer: "bob".id))
        #expect(copy == PresenceTopic(user: "alice".id, audience: .viewer("bob".id)))
        for other in ["presence/", "presence/alice", "presence/alice//", "presence/a/b/c/", "group/t/", "presence/a%/"]
        {
            #expect(PresenceTopic(Array(other.utf8)) == nil, "\(other)")
        }
    }

    /// A viewer's copy is for that viewer only; the truth and the records for everyone are for all who receive them.
    @Test func aCopyIsForItsViewerOnly() throws {
        let copy = try #require(PresenceTopic(Topic.presence("alice".id, viewer: "bob".id)))
        #expect(copy.isFor("bob".id) && !copy.isFor("zoe".id) && !copy.isFor(nil))
        for topic in [Array("presence/alice/".utf8), Topic.presenceForEveryone("alice".id)] {
            let read = try #require(PresenceTopic(topic))
            #expect(read.isFor("bob".id) && read.isFor(nil))
        }
    }
}
