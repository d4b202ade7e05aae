import RollCallWire
import Testing

@Suite("JSON parser")
struct JSONParserTests {
    /// Valid documents parse to the expected values; numbers keep their literal text.
    @Test func parsesValues() throws {
        let json = try JSONParser.parse(#" {"a": [1, -2.5e3, true, false, null], "b": "x\"\\\/\n\u00e9\ud83d\ude00"} "#)
        #expect(
            json
                == .object([
                    "a": .array([.number("1"), .number("-2.5e3"), .bool(true), .bool(false), .null]),
                    "b": .string("x\"\\/\né😀"),
                ]))
    }

    /// Malformed documents are errors, never crashes.
    @Test(arguments: [
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "01", "1.", "-", "1e", "+1", "tru", "nul",
        "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00x\"", "{\"a\":1}{", "[1 2]", "\"a\u{01}b\"",
        "{\"a\":1,\"a\":2}", "NaN", "Infinity", "'a'",
    ])
    func rejectsMalformed(_ text: String) {
        #expect(throws: JSONError.self) { try JSONParser.parse(text) }
    }

    /// Invalid UTF-8 inside a string is rejected.
    @Test func rejectsInvalidUTF8() {
        #expect(throws: JSONError.self) { try JSONParser.parse([0x22, 0xC3, 0x28, 0x22]) }
        #expect(throws: JSONError.self) { try JSONParser.parse([0x22, 0x5C, 0x6E, 0xFF, 0x22]) }
    }

    /// Nesting is bounded, so a deep document cannot exhaust the stack.
    @Test func nestingIsBounded() throws {
        _ = try JSONParser.parse(String(repeating: "[", count: 32) + String(repeating: "]", count: 32))
        #expect(throws: JSONError.self) {
            try JSONParser.parse(String(repeating: "[", count: 33) + String(repeating: "]", count: 33))
        }
        #expect(throws: JSONError.self) { try JSONParser.parse(String(repeating: "[", count: 100_000)) }
    }

    /// Writing then parsing gives back the same value, escapes included.
    @Test(arguments: ["plain", "quote\" back\\slash", "new\nline\ttab\r", "ctl\u{01}\u{1f}", "é 😀 ✓", ""])
    func writerRoundTrips(_ text: String) throws {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key(text)
        writer.string(text)
        writer.key("n")
        writer.integer(-42)
        writer.endObject()
        #expect(try JSONParser.parse(writer.bytes) == .object([JSONKey(text): .string(text), "n": .number("-42")]))
    }

    /// Keys are compared by bytes: the same letter in two Unicode forms is two keys, not a duplicate.
    /// Integers are written digit by digit, as `String(_:)` writes them, across the whole range of every type the
    /// protocol writes, and past `Int64` by the fallback.
    @Test(arguments: [
        "0", "7", "-1", "10", "-10", "1795771033894006", "9223372036854775807", "-9223372036854775808",
        "18446744073709551615",
    ])
    func integersAreWrittenAsTheirDigits(_ text: String) throws {
        var writer = JSONWriter()
        writer.beginArray()
        if let signed = Int64(text) { writer.integer(signed) } else { writer.integer(UInt64(text)!) }
        writer.integer(Int32(-5))
        writer.endArray()
        #expect(String(decoding: writer.bytes, as: UTF8.self) == "[\(text),-5]")
    }

    /// A string of ASCII bytes and one of other UTF-8 come out as they went in; one invalid byte anywhere is refused,
    /// also after an ASCII prefix.
    @Test func stringsOnBothPathsRoundTrip() throws {
        for text in ["alice", "Zoë", "a\u{7f}b", String(repeating: "x", count: 300) + "✓"] {
            var writer = JSONWriter()
            writer.string(text)
            #expect(try JSONParser.parse(writer.bytes) == .string(text))
        }
        #expect(throws: JSONError.self) { try JSONParser.parse(Array("\"abc".utf8) + [0xC3] + Array("\"".utf8)) }
        #expect(throws: JSONError.self) { try JSONParser.parse(Array("\"abc".utf8) + [0xFF] + Array("\"".utf8)) }
    }

    @Test func keysInTwoUnicodeFormsAreDistinct() throws {
        let json = try JSONParser.parse(#"{"\#u{E9}": 1, "e\#u{301}": 2}"#)
        guard case .object(let members) = json else {
            Issue.record("not an object: \(json)")
            return
        }
        #expect(members.count == 2)
        #expect(members[JSONKey("\u{E9}")] == .number("1"))
        #expect(members[JSONKey("e\u{301}")] == .number("2"))
        #expect(throws: JSONError.self) { try JSONParser.parse(#"{"\#u{E9}": 1, "\#u{E9}": 2}"#) }
    }
}
