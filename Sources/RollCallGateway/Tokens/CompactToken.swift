import Foundation

/// A token's three segments (a compact JWS, RFC 7515 §7.1), each checked to be canonical base64url (RFC 7515 §2,
/// RFC 4648 §5 without padding): only `A-Z a-z 0-9 - _`, no `=`, no whitespace, no length that no byte string has,
/// and no set bit in the last character's unused bits. So one token has one spelling: a signature with `=` appended,
/// or with a last character that decodes to the same bytes, is refused rather than accepted as the same token.
struct CompactToken {
    /// The protected header's fields that choose the key.
    struct Header: Decodable {
        var alg: String
        var kid: String?
        /// Extensions the recipient must understand (RFC 7515 §4.1.11); RollCall understands none.
        var crit: [String]?
    }

    var header: Header

    /// Splits and checks `token`; the signature itself is jwt-kit's to check.
    static func parse(_ token: String) throws(TokenVerifier.Refusal) -> CompactToken {
        let segments = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3 else {
            throw TokenVerifier.Refusal(description: "not three dot-separated segments")
        }
        for (segment, name) in zip(segments, ["header", "payload", "signature"]) {
            guard isCanonicalBase64URL(segment) else {
                throw TokenVerifier.Refusal(description: "the \(name) is not canonical base64url")
            }
        }
        guard let bytes = decodeBase64URL(segments[0]),
            let header = try? JSONDecoder().decode(Header.self, from: bytes)
        else { throw TokenVerifier.Refusal(description: "the header is not a JSON object with an alg") }
        if let crit = header.crit {
            throw TokenVerifier.Refusal(description: "the header names critical extensions \(crit)")
        }
        return CompactToken(header: header)
    }

    /// Whether `text` is base64url as RFC 7515 writes it: non-empty, the URL alphabet only, no padding, a length
    /// that some byte string encodes to (not 1 more than a multiple of 4), and the unused low bits of the last
    /// character zero.
    static func isCanonicalBase64URL(_ text: some Collection<UInt8>) -> Bool {
        guard !text.isEmpty, text.count % 4 != 1 else { return false }
        var last: UInt8 = 0
        for byte in text {
            guard let value = sextet(byte) else { return false }
            last = value
        }
        switch text.count % 4 {
        case 2: return last & 0b1111 == 0
        case 3: return last & 0b11 == 0
        default: return true
        }
    }

    /// The bytes of canonical base64url `text`.
    static func decodeBase64URL(_ text: some Collection<UInt8>) -> Data? {
        var standard = String(decoding: text, as: UTF8.self)
            .replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        standard += String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4)
        return Data(base64Encoded: standard)
    }

    /// The 6-bit value of a base64url character, or `nil` for any other byte.
    private static func sextet(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): byte - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): byte - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): 62
        case UInt8(ascii: "_"): 63
        default: nil
        }
    }
}
