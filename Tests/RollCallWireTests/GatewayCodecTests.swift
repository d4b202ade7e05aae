import RollCallCore
import RollCallWire
import Testing

@Suite("WebSocket frames")
struct GatewayCodecTests {
    func decode(_ text: String, maxTopics: Int = 4) -> Result<GatewayRequest, RequestRejection> {
        Codec.decodeGatewayRequest(Array(text.utf8), maxTopics: maxTopics)
    }

    /// subscribe, unsubscribe and auth decode with their fields; every other op decodes as on the command socket.
    @Test func decodesOps() throws {
        #expect(
            try decode(#"{"op":"subscribe","id":1,"topics":["presence/alice/","group/g1/","broker/","presence/"]}"#)
                .get()
                == .subscribe(
                    id: .number("1"),
                    topics: [.presence("alice".id), .group(GroupID(validating: "g1")!), .broker, .allPresence]))
        #expect(
            try decode(#"{"op":"unsubscribe","topics":["broker/"]}"#).get() == .unsubscribe(id: nil, topics: [.broker]))
        #expect(try decode(#"{"op":"auth","id":"a","token":"t.t.t"}"#).get() == .auth(id: .string("a"), token: "t.t.t"))
        #expect(
            try decode(#"{"op":"hello","user":"bob","keepalive":"connection"}"#).get()
                == .request(RequestEnvelope(id: nil, request: .hello(.init(user: "bob".id, keepAlive: .connection)))))
        #expect(
            try decode(#"{"op":"hello","user":"bob","keepalive":"ttl"}"#).get()
                == .request(RequestEnvelope(id: nil, request: .hello(.init(user: "bob".id)))))
    }

    /// Bad topics, too many topics, a bad keepalive and a missing token are errors that keep the id.
    @Test func rejects() {
        #expect(decode(#"{"op":"subscribe","id":2,"topics":["presence/al"]}"#).error?.error.code == .badRequest)
        #expect(decode(#"{"op":"subscribe","id":2,"topics":["presence/al"]}"#).error?.id == .number("2"))
        #expect(decode(#"{"op":"subscribe","topics":"broker/"}"#).error?.error.code == .badRequest)
        #expect(decode(#"{"op":"subscribe","topics":[1]}"#).error?.error.code == .badRequest)
        #expect(decode(#"{"op":"subscribe","topics":["broker/","broker/"]}"#, maxTopics: 1).error?.error.code == .limit)
        #expect(decode(#"{"op":"auth"}"#).error?.error.code == .badRequest)
        #expect(decode(#"{"op":"hello","user":"bob","keepalive":"forever"}"#).error?.error.code == .badRequest)
        #expect(decode(#"{"op":"nope"}"#).error?.error.code == .unknownOp)
        #expect(decode("[]").error?.error.code == .badRequest)
    }

    /// An update frame carries the topic and exactly the bytes the update socket carries.
    @Test func encodesUpdate() {
        let body = Array(#"{"user":"alice","seq":7}"#.utf8)
        let frame = Codec.encodeUpdate(topic: Array("presence/alice/".utf8), body: body)
        #expect(
            String(decoding: frame, as: UTF8.self) == #"{"topic":"presence/alice/","message":{"user":"alice","seq":7}}"#
        )
    }
}
