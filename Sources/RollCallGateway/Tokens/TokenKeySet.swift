import Foundation
import JWTKit

/// One source's keys, parsed: a key file's or a JWKS URL's. Immutable once made, so that a reload or a refresh
/// swaps a whole set and a token is never checked against half of one.
public struct TokenKeySet: Sendable {
    let collection: JWTKeyCollection
    /// The `kid`s of the set's keys (a JWKS's; a PEM key or an HMAC secret has none).
    let kids: Set<String>
    /// Whether the set holds a key without a `kid` (a PEM key or an HMAC secret), which checks tokens whose `kid` no
    /// set knows, as jwt-kit's default key did before.
    let hasKeyWithoutKid: Bool
    /// The `kid` of a JWKS's first key, which checks a token without `kid` (jwt-kit's default key).
    var defaultKid: String?
    /// What a reload compares (``RevokedKeys``).
    var identity = TokenKeyIdentity()

    /// The key without `kid`, as a grant names it.
    var unnamedRef: TokenKeyRef? { identity.unnamedKey.map(TokenKeyRef.unnamed) }

    /// Why a key file or a JWKS cannot be used.
    public struct KeyError: Error, CustomStringConvertible {
        public var description: String
    }

    /// A JWKS document (`{"keys":[...]}`). Keys for another use than signatures (`"use":"enc"`, as Keycloak
    /// publishes beside its signing keys), and keys jwt-kit cannot use (another `kty`, no `kid`), are left out
    /// rather than failing the set; a set with no key left is refused.
    static func jwks(_ json: String) async throws(KeyError) -> TokenKeySet {
        guard let document = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any],
            let entries = document["keys"] as? [Any]
        else { throw KeyError(description: "not a JWKS document ({\"keys\":[...]})") }
        let collection = JWTKeyCollection()
        var kids: Set<String> = []
        var first: String?
        var problems: [String] = []
        for entry in entries {
            guard let object = entry as? [String: Any] else { continue }
            if let use = object["use"] as? String, use != "sig" { continue }
            do {
                let jwk = try JSONDecoder().decode(JWK.self, from: JSONSerialization.data(withJSONObject: object))
                try await collection.add(jwk: jwk)
                if let kid = jwk.keyIdentifier?.string {
                    kids.insert(kid)
                    if first == nil { first = kid }
                }
            } catch {
                problems.append("\(object["kid"] ?? "a key without kid"): \(error)")
            }
        }
        guard !kids.isEmpty else {
            throw KeyError(description: "the JWKS has no usable signing key\(problems.isEmpty ? "" : ": \(problems)")")
        }
        return TokenKeySet(
            collection: collection, kids: kids, hasKeyWithoutKid: false, defaultKid: first,
            identity: TokenKeyIdentity(kids: kids))
    }

    /// A key file's text: a JWKS (`{"keys":[...]}`), a PEM public key (RSA, P-256 or Ed25519), or else an HMAC
    /// secret (the file's bytes, one trailing newline dropped), which must be at least 32 bytes.
    static func keyFile(_ text: String) async throws(KeyError) -> TokenKeySet {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("{") { return try await jwks(trimmed) }
        let collection = JWTKeyCollection()
        var unnamedKey = trimmed
        if trimmed.hasPrefix("-----BEGIN") {
            if let key = try? Insecure.RSA.PublicKey(pem: trimmed) {
                await collection.add(rsa: key, digestAlgorithm: .sha256)
            } else if let key = try? ES256PublicKey(pem: trimmed) {
                await collection.add(ecdsa: key)
            } else if let key = try? EdDSA.PublicKey(pem: trimmed) {
                await collection.add(eddsa: key)
            } else {
                throw KeyError(description: "a PEM file must hold an RSA, P-256 or Ed25519 public key")
            }
        } else {
            var secret = text
            if secret.hasSuffix("\n") { secret.removeLast() }
            guard secret.utf8.count >= 32 else {
                throw KeyError(description: "an HMAC secret must be at least 32 bytes, not \(secret.utf8.count)")
            }
            await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
            unnamedKey = secret
        }
        return TokenKeySet(
            collection: collection, kids: [], hasKeyWithoutKid: true,
            identity: TokenKeyIdentity(unnamedKeyText: unnamedKey)
        )
    }

    /// The key file at `path`, read now.
    static func keyFile(path: String) async throws(KeyError) -> TokenKeySet {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw KeyError(description: "cannot read '\(path)'")
        }
        return try await keyFile(String(decoding: data, as: UTF8.self))
    }
}
