import Foundation
import JWTKit
import Logging
import RollCallBroker
import RollCallCore
import RollCallSecurity
import Synchronization

/// The claims RollCall reads from a token: `sub` (the user), `exp` (required), `nbf` and `iat` if present, an
/// optional `role` (`user`, the default; `reader`; `operator`), and `iss` and `aud` when the broker is told to check
/// them.
struct GatewayClaims: JWTPayload {
    var sub: SubjectClaim
    var exp: ExpirationClaim
    var nbf: NotBeforeClaim?
    var iat: IssuedAtClaim?
    var iss: IssuerClaim?
    var aud: AudienceClaim?
    var role: String?

    /// Nothing here: the verifier checks the times against the clock it is given, and issuer and audience against
    /// what it expects.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// What a valid token grants.
public struct Grant: Sendable, Equatable {
    /// The token's `sub`.
    public var user: UserID
    /// What the token allows (docs/websocket.md): a `user` token acts as its `sub` only.
    public var role: Role
    /// When it expires (`exp`), in seconds since 1970.
    public var expires: Int64
    /// The key that checked the token, the key file's or the JWKS URL's (``TokenKeyRef``): a reload of the file,
    /// or a good fetch of the URL, that takes it away closes the connection.
    public var key: TokenKeyRef? = nil
}

/// Checks tokens (JWT) signed by the app's backend or an identity provider: HS256 with a shared secret, or RS256,
/// ES256 or EdDSA with a public key from a PEM file or a JWKS file (`--jwt-key-file`, re-read on SIGHUP), and the
/// keys of a JWKS URL (`--jwt-jwks-url`, ``JWKSSource``). Crypto is jwt-kit's (swift-crypto); nothing here is
/// hand-written crypto. The rules beyond the signature (docs/websocket.md, Tokens) follow RFC 7515 and RFC 7519
/// strictly: canonical base64url, the header's `alg` the key's own, `exp` required and not past, `nbf` honoured,
/// and a bounded lifetime.
public final class TokenVerifier: Sendable {
    /// What a token must satisfy besides its signature.
    public struct Rules: Sendable {
        /// The `iss` every token must carry, if set.
        public var issuer: String?
        /// An `aud` every token must carry, if set.
        public var audience: String?
        /// `exp` at most this many seconds after `iat` (or after now, without `iat` or with one in the future).
        public var maxLifetimeSeconds: Int64
        /// `nbf` may be this far in the future, for clocks that disagree a little.
        public var notBeforeLeewaySeconds: Int64 = Self.notBeforeLeewaySeconds

        public static let notBeforeLeewaySeconds: Int64 = 60

        /// `maxLifetimeSeconds` defaults to `--jwt-max-lifetime-s`'s default, written once in
        /// ``WebSocketSettings``.
        public init(
            issuer: String? = nil, audience: String? = nil,
            maxLifetimeSeconds: Int64 = WebSocketSettings().jwtMaxLifetimeSeconds
        ) {
            self.issuer = issuer
            self.audience = audience
            self.maxLifetimeSeconds = maxLifetimeSeconds
        }
    }

    /// Why a token was refused. Never shown to the client (a 401 says nothing more), only logged at debug level.
    public struct Refusal: Error, CustomStringConvertible {
        public var description: String
    }

    /// Why a key or certificate file cannot be used.
    public struct KeyFileError: Error, CustomStringConvertible {
        public var description: String
    }

    private let keyFile: String?
    private let fileKeys = KeySetBox()
    private let jwks: JWKSSource?
    private let rules: Rules
    private let logger: Logger
    /// Told of the keys each reload of the key file takes away (the WebSocket server closes the connections they
    /// checked); the JWKS URL's source tells its own (``JWKSSource/onKeysRevoked(_:)``).
    private let revocationObservers = Mutex<[@Sendable (RevokedKeys) -> Void]>([])

    /// Reads `keyFile` (a JWKS, a PEM public key, or an HMAC secret of at least 32 bytes) now; `jwks` must have
    /// made its first fetch (``JWKSSource/start()``). At least one of the two.
    public init(keyFile: String?, jwks: JWKSSource?, rules: Rules, logger: Logger) async throws(TokenKeySet.KeyError) {
        precondition(keyFile != nil || jwks != nil, "a TokenVerifier needs keys")
        self.keyFile = keyFile
        self.jwks = jwks
        self.rules = rules
        self.logger = logger
        if let keyFile {
            do {
                let set = try await TokenKeySet.keyFile(path: keyFile)
                fileKeys.value.withLock { $0 = set }
            } catch {
                throw TokenKeySet.KeyError(description: "--jwt-key-file: \(error)")
            }
        }
    }

    /// The same from a key file's text, for tests.
    public init(keyText: String, rules: Rules, logger: Logger = Logger(label: "rollcall.tokens"))
        async throws(TokenKeySet.KeyError)
    {
        keyFile = nil
        jwks = nil
        self.rules = rules
        self.logger = logger
        let set = try await TokenKeySet.keyFile(keyText)
        fileKeys.value.withLock { $0 = set }
    }

    /// Whether the source of the key that checked a token, as it is now, still has that key (`nil`, no tokens:
    /// yes): for a connection whose token was checked while a reload of the key file, or a fetch of the JWKS URL,
    /// took its key away, before it could hear of it.
    func stillHolds(_ key: TokenKeyRef?) -> Bool {
        switch key {
        case nil: true
        case .jwksKid?: jwks?.keys?.identity.holdsFromJWKSURL(key) ?? false
        case .kid?, .unnamed?: fileKeys.value.withLock { $0 }?.identity.holds(key) ?? false
        }
    }

    /// Calls `observer` with the keys each later reload of the key file, or good fetch of the JWKS URL, takes away,
    /// if it takes any.
    func onKeysRevoked(_ observer: @escaping @Sendable (RevokedKeys) -> Void) {
        revocationObservers.withLock { $0.append(observer) }
        jwks?.onKeysRevoked(observer)
    }

    /// Reads `--jwt-key-file` again (SIGHUP): tokens are checked against its new keys from now on, and the
    /// connections whose token a key it took away checked are closed (``onKeysRevoked(_:)``). A file that cannot be
    /// read or used changes nothing; the error is logged and returned.
    @discardableResult
    public func reloadKeyFile() async -> TokenKeySet.KeyError? {
        guard let keyFile else { return nil }
        do {
            let set = try await TokenKeySet.keyFile(path: keyFile)
            let old = fileKeys.value.withLock { keys in
                defer { keys = set }
                return keys
            }
            let revoked = old.map { RevokedKeys.between(old: $0.identity, new: set.identity) } ?? RevokedKeys()
            logger.notice(
                "SIGHUP: token key file reloaded",
                metadata: [
                    "file": "\(keyFile)", "kids_removed": "\(revoked.kids.sorted())",
                    "key_without_kid_changed": "\(revoked.unnamed != nil)",
                ])
            if !revoked.isEmpty {
                for observer in revocationObservers.withLock({ $0 }) { observer(revoked) }
            }
            return nil
        } catch {
            logger.error(
                "SIGHUP: token key file NOT reloaded; the previous keys stay",
                metadata: ["file": "\(keyFile)", "error": "\(error)"])
            return error
        }
    }

    /// The JWKS URL's source, if any, for the server to run.
    public var jwksSource: JWKSSource? { jwks }

    /// Checks a token's form, signature, times, issuer and audience at `now` (seconds since 1970), and reads what
    /// it grants.
    public func verify(_ token: String, now: Double) async throws(Refusal) -> Grant {
        let header = try CompactToken.parse(token).header
        let (set, keyRef) = try await keySet(for: header.kid)
        let claims: GatewayClaims
        do {
            let key = try await set.collection.getKey(for: header.kid.map(JWKIdentifier.init(string:)), alg: header.alg)
            guard key.name == header.alg else {
                throw Refusal(description: "the header says \(header.alg) but the key is \(key.name)")
            }
            claims = try await set.collection.verify(token, as: GatewayClaims.self)
        } catch let refusal as Refusal {
            throw refusal
        } catch {
            throw Refusal(description: "\(error)")
        }
        try checkTimes(claims, now: now)
        if let issuer = rules.issuer, claims.iss?.value != issuer {
            throw Refusal(description: "issuer is not \(issuer)")
        }
        if let audience = rules.audience {
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
        // The lifetime bound keeps `exp` within a year of now; the clamp keeps the conversion from trapping whatever
        // `now` a caller gives.
        let seconds = min(max(claims.exp.value.timeIntervalSince1970.rounded(.down), -9e18), 9e18)
        return Grant(user: user, role: role, expires: Int64(seconds), key: keyRef)
    }

    /// `exp` not past; `nbf` not further ahead than the leeway; `exp` at most the longest lifetime after `iat`, or
    /// after now if `iat` is absent or ahead (so that a future `iat` cannot stretch it).
    private func checkTimes(_ claims: GatewayClaims, now: Double) throws(Refusal) {
        let expires = claims.exp.value.timeIntervalSince1970
        guard expires > now else { throw Refusal(description: "expired") }
        if let notBefore = claims.nbf?.value.timeIntervalSince1970,
            notBefore > now + Double(rules.notBeforeLeewaySeconds)
        {
            throw Refusal(description: "not valid before \(notBefore) (nbf)")
        }
        let start = min(claims.iat?.value.timeIntervalSince1970 ?? now, now)
        guard expires - start <= Double(rules.maxLifetimeSeconds) else {
            throw Refusal(
                description: "lifetime \(expires - start) s exceeds --jwt-max-lifetime-s \(rules.maxLifetimeSeconds)")
        }
    }

    /// The set whose key checks a token with this `kid`: the key file's if it has the `kid`, else the JWKS URL's
    /// (fetched again, rate-limited, if it lacks it too), else the key file's key without a `kid`. Without a `kid`:
    /// the key file's, else the JWKS URL's default key. With it, which key of which source that is (``Grant/key``).
    private func keySet(for kid: String?) async throws(Refusal) -> (TokenKeySet, TokenKeyRef?) {
        let file = fileKeys.value.withLock { $0 }
        guard let kid else {
            if let file { return (file, file.unnamedRef ?? file.defaultKid.map(TokenKeyRef.kid)) }
            if let set = jwks?.keys { return (set, set.defaultKid.map(TokenKeyRef.jwksKid)) }
            throw Refusal(description: "no keys")
        }
        if let file, file.kids.contains(kid) { return (file, .kid(kid)) }
        if let jwks {
            if let set = jwks.keys, set.kids.contains(kid) { return (set, .jwksKid(kid)) }
            if let set = await jwks.keysForUnknownKid(), set.kids.contains(kid) { return (set, .jwksKid(kid)) }
        }
        if let file, file.hasKeyWithoutKid { return (file, file.unnamedRef) }
        throw Refusal(description: "no key has kid '\(kid)'")
    }
}
