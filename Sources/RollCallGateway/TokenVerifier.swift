import Foundation
import JWTKit
import RollCallCore
import RollCallSecurity

/// The claims RollCall reads from a token: `sub` (the user), `exp` (required), an optional `role` (`user`, the
/// default; `reader`; `operator`), and `iss` and `aud` when the broker is told to check them.
struct GatewayClaims: JWTPayload {
    var sub: SubjectClaim
    var exp: ExpirationClaim
    var iss: IssuerClaim?
    var aud: AudienceClaim?
    var role: String?

    /// Signature checks come first (jwt-kit); this checks the expiry. Issuer and audience are checked by the
    /// verifier, which knows what to expect.
    func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
    }
}

/// What a valid token grants.
public struct Grant: Sendable, Equatable {
    /// The token's `sub`.
    public var user: UserID
    /// What the token allows (docs/websocket.md): a `user` token acts as its `sub` only.
    public var role: Role
    /// When it expires (`exp`), in seconds since 1970.
    public var expires: Int64
}

/// Checks tokens (JWT) signed by the app's backend: HS256 with a shared secret, or RS256, ES256 or EdDSA with a public
/// key from a PEM file or a JWKS file. Crypto is jwt-kit's (swift-crypto); nothing here is hand-written crypto.
public struct TokenVerifier: Sendable {
    private let keys: JWTKeyCollection
    private let issuer: String?
    private let audience: String?

    /// Why a token was refused. Never shown to the client (a 401 says nothing more), only logged at debug level.
    public struct Refusal: Error, CustomStringConvertible {
        public var description: String
    }

    /// Why a key file cannot be used.
    public struct KeyFileError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Reads the key file: a JWKS (`{"keys":[...]}`), a PEM public key (RSA, P-256 or Ed25519), or else an HMAC
    /// secret (the file's bytes, one trailing newline dropped), which must be at least 32 bytes.
    public init(keyFile path: String, issuer: String?, audience: String?) async throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw KeyFileError(description: "--jwt-key-file: cannot read '\(path)'")
        }
        try await self.init(keyText: String(decoding: data, as: UTF8.self), issuer: issuer, audience: audience)
    }

    /// The same from the key file's text.
    public init(keyText text: String, issuer: String?, audience: String?) async throws {
        let keys = JWTKeyCollection()
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("{") {
            do {
                try await keys.add(jwksJSON: trimmed)
            } catch {
                throw KeyFileError(description: "--jwt-key-file: not a usable JWKS file: \(error)")
            }
        } else if trimmed.hasPrefix("-----BEGIN") {
            if let key = try? Insecure.RSA.PublicKey(pem: trimmed) {
                await keys.add(rsa: key, digestAlgorithm: .sha256)
            } else if let key = try? ES256PublicKey(pem: trimmed) {
                await keys.add(ecdsa: key)
            } else if let key = try? EdDSA.PublicKey(pem: trimmed) {
                await keys.add(eddsa: key)
            } else {
                throw KeyFileError(
                    description: "--jwt-key-file: a PEM file must hold an RSA, P-256 or Ed25519 public key")
            }
        } else {
            var secret = text
            if secret.hasSuffix("\n") { secret.removeLast() }
            guard secret.utf8.count >= 32 else {
                throw KeyFileError(
                    description: "--jwt-key-file: an HMAC secret must be at least 32 bytes, not \(secret.utf8.count)")
            }
            await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        }
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
    }

    /// Checks a token's signature, expiry, issuer and audience, and reads what it grants.
    public func verify(_ token: String) async throws(Refusal) -> Grant {
        let claims: GatewayClaims
        do {
            claims = try await keys.verify(token, as: GatewayClaims.self)
        } catch {
            throw Refusal(description: "\(error)")
        }
        if let issuer, claims.iss?.value != issuer { throw Refusal(description: "issuer is not \(issuer)") }
        if let audience {
            guard let aud = claims.aud, (try? aud.verifyIntendedAudience(includes: audience)) != nil else {
                throw Refusal(description: "audience does not include \(audience)")
            }
        }
        guard let user = UserID(validating: claims.sub.value) else {
            throw Refusal(description: "sub is not a valid user id")
        }
        let role: Role
        switch claims.role ?? "user" {
        case "user": role = .user(user)
        case "reader": role = .reader
        case "operator": role = .operator
        case let other: throw Refusal(description: "unknown role '\(other)'")
        }
        // A signed `exp` far in the future (after the year 2262) must not trap the conversion: clamp it.
        let seconds = min(max(claims.exp.value.timeIntervalSince1970.rounded(.down), -9e18), 9e18)
        return Grant(user: user, role: role, expires: Int64(seconds))
    }
}
