import Foundation
import JWTKit

/// Tokens for the tests, signed with jwt-kit's algorithms over a header and claims the test writes as it likes
/// (an `alg` that is not the key's, an `exp` of 1e300), so that each strict rule meets the token it refuses.
struct TokenMint {
    /// The key that signs: its collection signs with its only key.
    let keys: JWTKeyCollection
    let kid: String?

    /// An HS256 secret of 32 bytes and more.
    static let secret = "a-test-secret-of-more-than-32-bytes-for-hs256"

    static func hmac(_ secret: String = Self.secret) async -> TokenMint {
        TokenMint(keys: await JWTKeyCollection().add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256), kid: nil)
    }

    static func ecdsa(_ key: ES256PrivateKey, kid: String) async -> TokenMint {
        TokenMint(keys: await JWTKeyCollection().add(ecdsa: key, kid: JWKIdentifier(string: kid)), kid: kid)
    }

    /// A token whose header is `{"alg": alg, "typ": "JWT", "kid": kid}` (the key's `alg` unless told) and whose
    /// payload is `claims`, signed by the key whatever the header says.
    func token(_ claims: [String: Any], alg: String? = nil, extraHeader: [String: Any] = [:]) async throws -> String {
        let key = try await keys.getKey(for: kid.map(JWKIdentifier.init(string:)))
        var header: [String: Any] = ["alg": alg ?? key.name, "typ": "JWT"]
        if let kid { header["kid"] = kid }
        header.merge(extraHeader) { $1 }
        let input =
            Self.base64URL(try JSONSerialization.data(withJSONObject: header, options: .sortedKeys)) + "."
            + Self.base64URL(try JSONSerialization.data(withJSONObject: claims, options: .sortedKeys))
        return input + "." + Self.base64URL(Data(try key.sign(Array(input.utf8))))
    }

    /// Claims for `sub` valid at `now` for `lifetime` seconds.
    static func claims(_ sub: String = "alice", now: Double, lifetime: Double = 600) -> [String: Any] {
        ["sub": sub, "iat": now, "exp": now + lifetime]
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The JWKS entry of an ES256 key's public half.
    static func jwk(_ key: ES256PrivateKey, kid: String) -> [String: String] {
        let parameters = key.publicKey.parameters!
        return [
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid, "x": parameters.x,
            "y": parameters.y,
        ]
    }

    /// A JWKS document of these keys.
    static func jwks(_ keys: [(ES256PrivateKey, String)]) throws -> String {
        let document = ["keys": keys.map { jwk($0.0, kid: $0.1) }]
        return String(decoding: try JSONSerialization.data(withJSONObject: document), as: UTF8.self)
    }
}
