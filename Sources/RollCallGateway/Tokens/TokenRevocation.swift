/// Which key of `--jwt-key-file` checked a connection's token: what a reload of the file is checked against
/// (docs/websocket.md, "Keys reloaded"). A token checked by a key of the JWKS URL has none.
public enum TokenKeyRef: Sendable, Hashable {
    /// A key of a JWKS file, by its `kid` (for a token without `kid`, the file's first key, jwt-kit's default).
    case kid(String)
    /// The file's one key without a `kid` (a PEM public key or an HMAC secret), by a fingerprint of its text
    /// (``TokenKeyIdentity/unnamedKey``).
    case unnamed(Int)
}

/// What a key file's keys are, as far as revocation goes: their `kid`s, and a fingerprint of the key without one.
struct TokenKeyIdentity: Sendable, Equatable {
    var kids: Set<String> = []
    /// A hash of the PEM key's or the HMAC secret's text (Swift's `Hasher`, seeded per process: compared only within
    /// one), so that a reload tells a changed key from the same one read again without keeping the secret twice;
    /// `nil` for a JWKS file.
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

    /// Whether the key that checked a token is among these (`nil`, the JWKS URL's key: always).
    func holds(_ key: TokenKeyRef?) -> Bool {
        switch key {
        case .kid(let kid)?: kids.contains(kid)
        case .unnamed(let fingerprint)?: unnamedKey == fingerprint
        case nil: true
        }
    }
}

/// The keys a reload of `--jwt-key-file` took away: the connections whose token one of them checked are closed
/// (4003) and their sessions end, reason `revoked`. Only the keys' identity is compared, never a signature: a `kid`
/// gone from the file, or the key without `kid` changed or gone. A `kid` still in the file counts as the same key.
public struct RevokedKeys: Sendable, Equatable {
    /// `kid`s the old file had and the new one has not.
    var kids: Set<String> = []
    /// The old file's key without a `kid`, if it changed or went.
    var unnamed: Int?

    /// What went from `old` to `new`.
    static func between(old: TokenKeyIdentity, new: TokenKeyIdentity) -> RevokedKeys {
        RevokedKeys(
            kids: old.kids.subtracting(new.kids), unnamed: old.unnamedKey == new.unnamedKey ? nil : old.unnamedKey)
    }

    var isEmpty: Bool { kids.isEmpty && unnamed == nil }

    /// Whether a connection whose token `key` checked must be closed; `nil` (the JWKS URL's key, or no tokens):
    /// never.
    func covers(_ key: TokenKeyRef?) -> Bool {
        switch key {
        case .kid(let kid)?: kids.contains(kid)
        case .unnamed(let fingerprint)?: unnamed == fingerprint
        case nil: false
        }
    }
}
