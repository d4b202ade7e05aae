import Foundation
import JWTKit
import RollCallCore
import Testing

@testable import RollCallGateway

/// The verifier's clock in the tests: 2027-01-15 08:00 UTC.
private let t0: Double = 1_800_000_000

/// The token rules of docs/websocket.md (Tokens), each against a token jwt-kit signed, at a fixed time.
@Suite struct TokenVerifierTests {
    static let now = t0

    static func verifier(maxLifetime: Int64 = 86_400) async throws -> TokenVerifier {
        try await TokenVerifier(keyText: TokenMint.secret, rules: .init(maxLifetimeSeconds: maxLifetime))
    }

    /// A token jwt-kit signs the ordinary way is accepted and grants its `sub`, as a user, until its `exp`.
    @Test func aValidTokenIsAccepted() async throws {
        struct Claims: JWTPayload {
            var sub: SubjectClaim
            var exp: ExpirationClaim
            var iat: IssuedAtClaim
            func verify(using algorithm: some JWTAlgorithm) async throws {}
        }
        let keys = await JWTKeyCollection().add(hmac: HMACKey(from: TokenMint.secret), digestAlgorithm: .sha256)
        let token = try await keys.sign(
            Claims(
                sub: .init(value: "alice"), exp: .init(value: Date(timeIntervalSince1970: Self.now + 3_600)),
                iat: .init(value: Date(timeIntervalSince1970: Self.now))))
        let grant = try await Self.verifier().verify(token, now: Self.now)
        #expect(
            grant
                == Grant(
                    user: UserID(validating: "alice")!, role: .user(UserID(validating: "alice")!),
                    expires: Int64(Self.now) + 3_600, key: grant.key))
    }

    /// `nbf` an hour ahead is refused (RFC 7519 §4.1.5); within the 60 s leeway, or past, it is accepted.
    @Test(arguments: [(3_600.0, false), (61, false), (60, true), (30, true), (-3_600, true)])
    func notBefore(offset: Double, accepted: Bool) async throws {
        var claims = TokenMint.claims(now: Self.now)
        claims["nbf"] = Self.now + offset
        let token = try await TokenMint.hmac().token(claims)
        let grant = try? await Self.verifier().verify(token, now: Self.now)
        #expect((grant != nil) == accepted, "nbf now\(offset >= 0 ? "+" : "")\(offset)")
    }

    /// `exp` is required and must be ahead of now.
    @Test func expiredOrMissingExpIsRefused() async throws {
        let mint = await TokenMint.hmac()
        let verifier = try await Self.verifier()
        let expired = try await mint.token(["sub": "alice", "iat": Self.now - 600, "exp": Self.now - 1])
        let atNow = try await mint.token(["sub": "alice", "exp": Self.now])
        let missing = try await mint.token(["sub": "alice", "iat": Self.now])
        for token in [expired, atNow, missing] {
            await #expect(throws: TokenVerifier.Refusal.self) { try await verifier.verify(token, now: Self.now) }
        }
    }

    /// A lifetime past `--jwt-max-lifetime-s` is refused, counted from `iat`, or from now without `iat` or with an
    /// `iat` ahead of now; a lifetime of exactly the limit is accepted.
    @Test(
        arguments: [
            (["iat": t0, "exp": t0 + 86_400], true),
            (["iat": t0 - 3_600, "exp": t0 + 82_800], true),
            (["exp": t0 + 86_400], true),
            (["iat": t0, "exp": t0 + 86_401], false),
            (["iat": t0 - 3_600, "exp": t0 + 82_801], false),
            (["exp": t0 + 86_401], false),
            (["exp": 1e18], false),
            (["exp": 1e300], false),
            (["iat": 1e300 - 10, "exp": 1e300], false),
            (["iat": t0 + 1e9, "exp": t0 + 1e9 + 60], false),
        ] as [([String: Double], Bool)])
    func lifetime(times: [String: Double], accepted: Bool) async throws {
        var claims: [String: Any] = ["sub": "alice"]
        claims.merge(times) { $1 }
        let token = try await TokenMint.hmac().token(claims)
        let grant = try? await Self.verifier().verify(token, now: Self.now)
        #expect((grant != nil) == accepted, "\(times)")
    }

    /// The limit is the one configured.
    @Test func theConfiguredLifetimeIsTheLimit() async throws {
        let token = try await TokenMint.hmac().token(TokenMint.claims(now: Self.now, lifetime: 3_601))
        #expect((try? await Self.verifier(maxLifetime: 3_600).verify(token, now: Self.now)) == nil)
        #expect((try? await Self.verifier(maxLifetime: 3_601).verify(token, now: Self.now)) != nil)
    }

    /// A header that names another algorithm than the key's is refused even though the signature is the key's:
    /// HS384 (or HS512, none, RS256) over an HS256 signature.
    @Test(arguments: ["HS384", "HS512", "none", "RS256", "hs256"])
    func anAlgOtherThanTheKeysIsRefused(alg: String) async throws {
        let mint = await TokenMint.hmac()
        let verifier = try await Self.verifier()
        let claims = TokenMint.claims(now: Self.now)
        #expect((try? await verifier.verify(mint.token(claims), now: Self.now)) != nil)
        let lying = try await mint.token(claims, alg: alg)
        await #expect(throws: TokenVerifier.Refusal.self) { try await verifier.verify(lying, now: Self.now) }
    }

    /// The same for a P-256 key from a PEM file: an ES384 header over an ES256 signature is refused.
    @Test func anAlgOtherThanAnECKeysIsRefused() async throws {
        let key = ES256PrivateKey()
        let mint = TokenMint(keys: await JWTKeyCollection().add(ecdsa: key), kid: nil)
        let verifier = try await TokenVerifier(keyText: key.publicKey.pemRepresentation, rules: .init())
        let claims = TokenMint.claims(now: Self.now)
        #expect((try? await verifier.verify(mint.token(claims), now: Self.now)) != nil)
        let lying = try await mint.token(claims, alg: "ES384")
        await #expect(throws: TokenVerifier.Refusal.self) { try await verifier.verify(lying, now: Self.now) }
    }

    /// A JWKS file: the token's `kid` picks the key; an encryption key (`"use":"enc"`) and a key of a type jwt-kit
    /// cannot use are left out, not fatal; a `kid` no key has is refused, as is a token without `kid` signed by
    /// another key than the first.
    @Test func aJWKSFileSkipsKeysItCannotUse() async throws {
        let signing = ES256PrivateKey()
        let encryption = ES256PrivateKey()
        var encryptionEntry = TokenMint.jwk(encryption, kid: "enc")
        encryptionEntry["use"] = "enc"
        let document: [String: Any] = [
            "keys": [
                ["kty": "oct", "kid": "hmac", "k": "c2VjcmV0"], encryptionEntry, TokenMint.jwk(signing, kid: "sig"),
            ]
        ]
        let text = String(decoding: try JSONSerialization.data(withJSONObject: document), as: UTF8.self)
        let verifier = try await TokenVerifier(keyText: text, rules: .init())
        let claims = TokenMint.claims(now: Self.now)
        #expect((try? await verifier.verify(TokenMint.ecdsa(signing, kid: "sig").token(claims), now: Self.now)) != nil)
        for token in [
            try await TokenMint.ecdsa(encryption, kid: "enc").token(claims),
            try await TokenMint.ecdsa(signing, kid: "other").token(claims),
            try await TokenMint(keys: JWTKeyCollection().add(ecdsa: encryption), kid: nil).token(claims),
        ] {
            await #expect(throws: TokenVerifier.Refusal.self) { try await verifier.verify(token, now: Self.now) }
        }
    }

    /// A token is accepted in its one canonical spelling only: `=` padding, the standard alphabet's `+` and `/`,
    /// whitespace, or a last character whose unused bits are set (the same bytes to a lenient decoder) are refused,
    /// in the signature and in the other segments.
    @Test func onlyCanonicalBase64URLIsAccepted() async throws {
        let verifier = try await Self.verifier()
        let mint = await TokenMint.hmac()
        // Tokens until one's signature has a `-` or `_` to swap for `+` or `/`.
        var token = try await mint.token(TokenMint.claims(now: Self.now))
        var lifetime = 600.0
        while !token.split(separator: ".")[2].contains(where: { $0 == "-" || $0 == "_" }) {
            lifetime += 1
            token = try await mint.token(TokenMint.claims(now: Self.now, lifetime: lifetime))
        }
        #expect((try? await verifier.verify(token, now: Self.now)) != nil)
        let parts = token.split(separator: ".").map(String.init)
        let signature = parts[2]
        // An HS256 signature is 32 bytes: 43 characters, whose last carries 2 unused bits.
        #expect(signature.count == 43)
        let last = signature.last!
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let sameBytes = alphabet[alphabet.firstIndex(of: last)! | 1]
        let variants = [
            "\(parts[0]).\(parts[1]).\(signature)=",
            "\(parts[0]).\(parts[1]).\(signature)==",
            "\(parts[0]).\(parts[1]).\(signature.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/"))",
            "\(parts[0]).\(parts[1]).\(signature.dropLast())\(sameBytes)",
            "\(parts[0]).\(parts[1]).\(signature.prefix(20)) \(signature.dropFirst(20))",
            "\(parts[0]).\(parts[1]).\(signature)\n",
            " \(token)",
            "\(parts[0])=.\(parts[1]).\(signature)",
            "\(parts[0]).\(parts[1])=.\(signature)",
            "\(parts[0]).\(parts[1]).\(signature).",
            "\(parts[0]).\(parts[1])",
            "\(parts[0])..\(signature)",
        ]
        for variant in variants {
            await #expect(throws: TokenVerifier.Refusal.self, "\(variant)") {
                try await verifier.verify(variant, now: Self.now)
            }
        }
    }

    /// The base64url check alone: the alphabet, no padding, no impossible length, the last character's unused
    /// bits zero.
    @Test(arguments: [
        ("QQ", true), ("QUI", true), ("QUJD", true), ("-_", false), ("-w", true), ("_A", true), ("QR", false),
        ("QUJ", false), ("QUK", false), ("Q", false), ("QUJDR", false), ("", false), ("QQ==", false),
        ("Q+", false), ("Q/", false), ("Q Q", false), ("QQ\n", false), ("QUJD.", false),
    ])
    func canonicalBase64URL(text: String, canonical: Bool) {
        #expect(CompactToken.isCanonicalBase64URL(Array(text.utf8)) == canonical, "\(text)")
    }

    /// A header with `crit` (extensions RollCall cannot understand, RFC 7515 §4.1.11) is refused.
    @Test func criticalExtensionsAreRefused() async throws {
        let mint = await TokenMint.hmac()
        let token = try await mint.token(TokenMint.claims(now: Self.now), extraHeader: ["crit": ["exp"], "exp": 1])
        await #expect(throws: TokenVerifier.Refusal.self) { try await Self.verifier().verify(token, now: Self.now) }
    }

    /// Another key's signature, or a payload changed after signing, is refused.
    @Test func aWrongSignatureIsRefused() async throws {
        let verifier = try await Self.verifier()
        let other = try await TokenMint.hmac("another-secret-of-more-than-32-bytes!!").token(
            TokenMint.claims(now: Self.now))
        await #expect(throws: TokenVerifier.Refusal.self) { try await verifier.verify(other, now: Self.now) }
        let token = try await TokenMint.hmac().token(TokenMint.claims(now: Self.now))
        let parts = token.split(separator: ".")
        let forged = TokenMint.base64URL(
            try JSONSerialization.data(withJSONObject: TokenMint.claims("mallory", now: Self.now), options: .sortedKeys)
        )
        await #expect(throws: TokenVerifier.Refusal.self) {
            try await verifier.verify("\(parts[0]).\(forged).\(parts[2])", now: Self.now)
        }
    }
}
