/// Which key checked a connection's token: what a reload of `--jwt-key-file`, or a good fetch of `--jwt-jwks-url`,
/// is checked against (docs/websocket.md, "Keys reloaded"). The two sources' keys never name each other: the same
/// `kid` in the key file and in the JWKS URL are two keys, and each source takes away only its own.
public enum TokenKeyRef: Sendable, Hashable {
    /// A key of a JWKS file, by its `kid` (for a token without `kid`, the file's first key, jwt-kit's default).
    case kid(String)
    /// The file's one key without a `kid` (a PEM public key or an HMAC secret), by a fingerprint of its text
    /// (``TokenKeyIdentity/unnamedKey``).
    case unnamed(Int)
    /// A key of the JWKS URL, by its `kid` (for a token without `kid`, the first key of the set that checked it).
    case jwksKid(String)
}

/// What one source's keys are, as far as revocation goes: their `kid`s, and a fingerprint of the key without one.
struct TokenKeyIdentity: Sendable, Equatable {
    var kids: Set<String> = []
    /// A hash of the PEM key's or the HMAC secret's text (Swift's `Hasher`, seeded per process: compared only within
    /// one), so that a reload tells a changed key from the same one read again without keeping the secret twice;
    /// `nil` for a JWKS.
    var unnamedKey: Int?

    init(kids: Set<String> = [], unnamedKey: Int? = nil) {
        self.kids = kids
        self.unnamedKey = unnamedKey
    }

    /// The identity of a key file whose key without `kid` has this text.
    init(unnamedKeyText text: String) {
        var hasher = Hasher()
        hasher.combine(text)
        self.init(unnamedKey: hasher.finalize())
    }

    /// Whether the key that checked a token is among these, read as a key file's keys (`nil`, no tokens: always; a
    /// JWKS URL's key: never, a key file does not hold it).
    func holds(_ key: TokenKeyRef?) -> Bool {
        switch key {
        case .kid(let kid)?: kids.contains(kid)
        case .unnamed(let fingerprint)?: unnamedKey == fingerprint
        case .jwksKid?: false
        case nil: true
        }
    }

    /// Whether the key that checked a token is among these, read as a JWKS URL's keys (`nil`: always; a key file's
    /// key: never).
    func holdsFromJWKSURL(_ key: TokenKeyRef?) -> Bool {
        switch key {
        case .jwksKid(let kid)?: kids.contains(kid)
        case .kid?, .unnamed?: false
        case nil: true
        }
    }
}

/// The keys a reload of `--jwt-key-file`, or a good fetch of `--jwt-jwks-url`, took away: the connections whose
/// token one of them checked are closed (4003) and their sessions end, reason `revoked`. Only the keys' identity is
/// compared, never a signature: a `kid` gone from its source, or the key file's key without `kid` changed or gone. A
/// `kid` still in its source counts as the same key.
public struct RevokedKeys: Sendable, Equatable {
    /// `kid`s the old key file had and the new one has not.
    var kids: Set<String> = []
    /// The old key file's key without a `kid`, if it changed or went.
    var unnamed: Int?
    /// `kid`s the JWKS URL's last good set had and the set just fetched has not.
    var jwksKids: Set<String> = []

    /// What went from the key file `old` to `new`.
    static func between(old: TokenKeyIdentity, new: TokenKeyIdentity) -> RevokedKeys {
        RevokedKeys(
            kids: old.kids.subtracting(new.kids), unnamed: old.unnamedKey == new.unnamedKey ? nil : old.unnamedKey)
    }

    /// What went from the JWKS URL's last good set `old` to the one just fetched, `new`.
    static func betweenJWKS(old: TokenKeyIdentity, new: TokenKeyIdentity) -> RevokedKeys {
        RevokedKeys(jwksKids: old.kids.subtracting(new.kids))
    }

    var isEmpty: Bool { kids.isEmpty && unnamed == nil && jwksKids.isEmpty }

    /// Whether a connection whose token `key` checked must be closed; `nil` (no tokens): never.
    func covers(_ key: TokenKeyRef?) -> Bool {
        switch key {
        case .kid(let kid)?: kids.contains(kid)
        case .unnamed(let fingerprint)?: unnamed == fingerprint
        case .jwksKid(let kid)?: jwksKids.contains(kid)
        case nil: false
        }
    }
}
