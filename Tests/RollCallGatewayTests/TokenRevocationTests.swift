import Foundation
import Hummingbird
import JWTKit
import Logging
import Synchronization
import Testing

@testable import RollCallGateway

/// Which open connections a reload of `--jwt-key-file`, or a good fetch of `--jwt-jwks-url`, closes: the decision on
/// the keys' identity alone, then the verifier that records which key checked each token and says what a reload or
/// a fetch took away.
@Suite struct TokenRevocationTests {
    static let now = Date().timeIntervalSince1970

    /// A `kid` gone from the file is revoked and one still there is not; the key without `kid` is revoked when its
    /// text changes or it goes, not when the same key is read again; the JWKS URL's keys (`nil`) never are.
    @Test func theDecisionComparesKeyIdentities() throws {
        let two = TokenKeyIdentity(kids: ["k1", "k2"])
        let removed = RevokedKeys.between(old: two, new: TokenKeyIdentity(kids: ["k2", "k3"]))
        #expect(removed == RevokedKeys(kids: ["k1"], unnamed: nil))
        #expect(removed.covers(.kid("k1")))
        #expect(!removed.covers(.kid("k2")))
        #expect(!removed.covers(.unnamed(1)))
        #expect(!removed.covers(nil))
        #expect(RevokedKeys.between(old: two, new: two).isEmpty)

        let secret = TokenKeyIdentity(unnamedKeyText: "the-first-secret-of-more-than-32-bytes")
        let oldKey = TokenKeyRef.unnamed(try #require(secret.unnamedKey))
        #expect(RevokedKeys.between(old: secret, new: secret).isEmpty)
        let changed = RevokedKeys.between(
            old: secret, new: TokenKeyIdentity(unnamedKeyText: "the-second-secret-of-more-than-32-bytes"))
        #expect(changed.covers(oldKey))
        #expect(!changed.covers(.kid("k1")))
        #expect(RevokedKeys.between(old: secret, new: two).covers(oldKey))
        #expect(RevokedKeys.between(old: two, new: secret) == RevokedKeys(kids: ["k1", "k2"], unnamed: nil))
    }

    /// The look-up for a token checked while a reload ran: a key is held while its `kid` or fingerprint is there.
    @Test func anIdentityHoldsItsOwnKeys() throws {
        let secret = TokenKeyIdentity(unnamedKeyText: "the-first-secret-of-more-than-32-bytes")
        let key = TokenKeyRef.unnamed(try #require(secret.unnamedKey))
        #expect(secret.holds(key))
        #expect(!TokenKeyIdentity(unnamedKeyText: "another-secret-of-more-than-32-bytes").holds(key))
        #expect(TokenKeyIdentity(kids: ["k1"]).holds(.kid("k1")))
        #expect(!TokenKeyIdentity(kids: ["k2"]).holds(.kid("k1")))
        #expect(TokenKeyIdentity(kids: ["k2"]).holds(nil))
    }

    /// A JWKS file of two keys: each token's grant names its key (a token without `kid`, the first key's); a reload
    /// that drops k1 says k1 is gone and k2 is not; reading the same file again says nothing.
    @Test func aReloadReportsTheRemovedKid() async throws {
        let (first, second) = (ES256PrivateKey(), ES256PrivateKey())
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-jwks-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try TokenMint.jwks([(first, "k1"), (second, "k2")]).write(toFile: file, atomically: true, encoding: .utf8)
        let verifier = try await TokenVerifier(
            keyFile: file, jwks: nil, rules: .init(), logger: Logger(label: "test"))
        let reports = Reports()
        verifier.onKeysRevoked { reports.add($0) }
        let claims = TokenMint.claims(now: Self.now)
        let byFirst = try await verifier.verify(TokenMint.ecdsa(first, kid: "k1").token(claims), now: Self.now)
        let bySecond = try await verifier.verify(TokenMint.ecdsa(second, kid: "k2").token(claims), now: Self.now)
        let withoutKid = try await TokenMint(
            keys: JWTKeyCollection().add(ecdsa: first), kid: nil
        ).token(claims)
        #expect(byFirst.key == .kid("k1"))
        #expect(bySecond.key == .kid("k2"))
        #expect(try await verifier.verify(withoutKid, now: Self.now).key == .kid("k1"))

        #expect(await verifier.reloadKeyFile() == nil)
        #expect(reports.all.isEmpty)
        try TokenMint.jwks([(second, "k2")]).write(toFile: file, atomically: true, encoding: .utf8)
        #expect(verifier.stillHolds(byFirst.key))
        #expect(await verifier.reloadKeyFile() == nil)
        #expect(!verifier.stillHolds(byFirst.key))
        #expect(verifier.stillHolds(bySecond.key))
        let revoked = try #require(reports.all.first)
        #expect(reports.all.count == 1)
        #expect(revoked.covers(byFirst.key))
        #expect(!revoked.covers(bySecond.key))
    }

    /// An HMAC secret file: its tokens name the key without `kid`; the same secret read again revokes nothing, a
    /// new one revokes it.
    @Test func aChangedSecretIsRevoked() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-jwt-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try TokenMint.secret.write(toFile: file, atomically: true, encoding: .utf8)
        let verifier = try await TokenVerifier(
            keyFile: file, jwks: nil, rules: .init(), logger: Logger(label: "test"))
        let reports = Reports()
        verifier.onKeysRevoked { reports.add($0) }
        let grant = try await verifier.verify(
            TokenMint.hmac().token(TokenMint.claims(now: Self.now)), now: Self.now)
        guard case .unnamed = grant.key else { throw KeyMissing() }
        try (TokenMint.secret + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        #expect(await verifier.reloadKeyFile() == nil)
        #expect(reports.all.isEmpty)
        try "another-secret-of-more-than-32-bytes-long".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(await verifier.reloadKeyFile() == nil)
        #expect(reports.all.map { $0.covers(grant.key) } == [true])
    }

    /// A fetch of the JWKS URL revokes the `kid`s the last good set had and the new one has not, and only the
    /// URL's: the same `kid` from the key file is another key, and the key file's reload does not take the URL's.
    @Test func theJWKSDecisionKeepsItsOwnSource() {
        let removed = RevokedKeys.betweenJWKS(
            old: TokenKeyIdentity(kids: ["k1", "k2"]), new: TokenKeyIdentity(kids: ["k2", "k3"]))
        #expect(removed == RevokedKeys(jwksKids: ["k1"]))
        #expect(removed.covers(.jwksKid("k1")))
        #expect(!removed.covers(.jwksKid("k2")))
        #expect(!removed.covers(.kid("k1")), "the key file's k1 is another key")
        #expect(!removed.covers(nil))
        #expect(
            RevokedKeys.betweenJWKS(old: TokenKeyIdentity(kids: ["k1"]), new: TokenKeyIdentity(kids: ["k1"])).isEmpty)
        #expect(!RevokedKeys.between(old: TokenKeyIdentity(kids: ["k1"]), new: .init()).covers(.jwksKid("k1")))

        let urlKeys = TokenKeyIdentity(kids: ["k1"])
        #expect(urlKeys.holdsFromJWKSURL(.jwksKid("k1")))
        #expect(!urlKeys.holdsFromJWKSURL(.jwksKid("k2")))
        #expect(!urlKeys.holdsFromJWKSURL(.kid("k1")))
        #expect(!urlKeys.holds(.jwksKid("k1")), "a key file never holds the JWKS URL's key")
        #expect(urlKeys.holdsFromJWKSURL(nil))
    }

    /// A JWKS URL of two keys, served over real HTTP: each token's grant names the URL's key (a token without `kid`,
    /// the set's first); failed fetches (500, not a JWKS, no signing key) and a fetch of the same set report
    /// nothing; a refresh that drops k1 reports k1 and not k2, after the new set is in force; a fetch asked for by an
    /// unknown `kid` that drops k2 reports k2.
    @Test func aJWKSFetchReportsTheRemovedKid() async throws {
        let (first, second, third) = (ES256PrivateKey(), ES256PrivateKey(), ES256PrivateKey())
        let endpoint = JWKSSourceTests.Endpoint()
        endpoint.serve(try TokenMint.jwks([(first, "k1"), (second, "k2")]))
        try await JWKSSourceTests.withEndpoint(endpoint) { url in
            let source = JWKSSource(url: url, logger: Logger(label: "jwks"))
            try await source.start()
            let verifier = try await TokenVerifier(
                keyFile: nil, jwks: source, rules: .init(), logger: Logger(label: "tokens"))
            let reports = Reports()
            let inForce = Mutex<[Bool]>([])
            verifier.onKeysRevoked { revoked in
                reports.add(revoked)
                inForce.withLock { $0.append(!verifier.stillHolds(.jwksKid(revoked.jwksKids.first ?? ""))) }
            }
            let claims = TokenMint.claims(now: Self.now)
            let byFirst = try await verifier.verify(TokenMint.ecdsa(first, kid: "k1").token(claims), now: Self.now)
            let bySecond = try await verifier.verify(TokenMint.ecdsa(second, kid: "k2").token(claims), now: Self.now)
            let withoutKid = try await TokenMint(keys: JWTKeyCollection().add(ecdsa: first), kid: nil).token(claims)
            #expect(byFirst.key == .jwksKid("k1"))
            #expect(bySecond.key == .jwksKid("k2"))
            #expect(try await verifier.verify(withoutKid, now: Self.now).key == .jwksKid("k1"))

            for (status, body) in [
                (HTTPResponse.Status.internalServerError, ""), (.ok, "<html>"), (.ok, #"{"keys":[]}"#),
            ] {
                endpoint.fail(status, body: body)
                let before = endpoint.fetches
                await source.refreshNow()
                #expect(endpoint.fetches == before + 1)
                #expect(verifier.stillHolds(byFirst.key), "after \(status) \(body)")
            }
            endpoint.serve(try TokenMint.jwks([(first, "k1"), (second, "k2")]))
            await source.refreshNow()
            #expect(reports.all.isEmpty, "failed fetches, and the same set fetched again, revoke nothing")

            endpoint.serve(try TokenMint.jwks([(second, "k2")]))
            await source.refreshNow()
            #expect(reports.all == [RevokedKeys(jwksKids: ["k1"])])
            #expect(!verifier.stillHolds(byFirst.key))
            #expect(verifier.stillHolds(bySecond.key))
            #expect(reports.all.first?.covers(byFirst.key) == true)
            #expect(reports.all.first?.covers(bySecond.key) == false)

            endpoint.serve(try TokenMint.jwks([(third, "k3")]))
            let byThird = try await verifier.verify(TokenMint.ecdsa(third, kid: "k3").token(claims), now: Self.now)
            #expect(byThird.key == .jwksKid("k3"))
            #expect(reports.all.count == 2)
            #expect(reports.all.last == RevokedKeys(jwksKids: ["k2"]))
            #expect(!verifier.stillHolds(bySecond.key))
            #expect(inForce.withLock { $0 } == [true, true], "observers are told once the new set is in force")
        }
    }

    /// The same `kid` in the key file and in the JWKS URL names two keys: a token the key file's `f1` checked stays
    /// when the URL drops its own `f1`, and a token the URL's `k2` checked stays when the key file drops its `k2`.
    @Test func theTwoSourcesRevokeOnlyTheirOwnKeys() async throws {
        let (fileKey, fileOther, urlKey, urlOther) = (
            ES256PrivateKey(), ES256PrivateKey(), ES256PrivateKey(), ES256PrivateKey()
        )
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-jwks-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try TokenMint.jwks([(fileKey, "f1")]).write(toFile: file, atomically: true, encoding: .utf8)
        let endpoint = JWKSSourceTests.Endpoint()
        endpoint.serve(try TokenMint.jwks([(urlOther, "f1"), (urlKey, "k2")]))
        try await JWKSSourceTests.withEndpoint(endpoint) { url in
            let source = JWKSSource(url: url, logger: Logger(label: "jwks"))
            try await source.start()
            let verifier = try await TokenVerifier(
                keyFile: file, jwks: source, rules: .init(), logger: Logger(label: "tokens"))
            let reports = Reports()
            verifier.onKeysRevoked { reports.add($0) }
            let claims = TokenMint.claims(now: Self.now)
            let byFile = try await verifier.verify(TokenMint.ecdsa(fileKey, kid: "f1").token(claims), now: Self.now)
            let byURL = try await verifier.verify(TokenMint.ecdsa(urlKey, kid: "k2").token(claims), now: Self.now)
            #expect(byFile.key == .kid("f1"))
            #expect(byURL.key == .jwksKid("k2"))

            endpoint.serve(try TokenMint.jwks([(urlKey, "k2")]))
            await source.refreshNow()
            #expect(reports.all == [RevokedKeys(jwksKids: ["f1"])])
            #expect(reports.all.first?.covers(byFile.key) == false)
            #expect(verifier.stillHolds(byFile.key))

            try TokenMint.jwks([(fileKey, "f1"), (fileOther, "k2")]).write(
                toFile: file, atomically: true, encoding: .utf8)
            #expect(await verifier.reloadKeyFile() == nil)
            try TokenMint.jwks([(fileKey, "f1")]).write(toFile: file, atomically: true, encoding: .utf8)
            #expect(await verifier.reloadKeyFile() == nil)
            #expect(reports.all.count == 2)
            #expect(reports.all.last == RevokedKeys(kids: ["k2"]))
            #expect(reports.all.last?.covers(byURL.key) == false)
            #expect(verifier.stillHolds(byURL.key))
        }
    }

    /// A revoked connection stops handing messages on and asks the loop to close it, once.
    @Test func theMachineClosesARevokedConnectionOnce() {
        var machine = ConnectionMachineTests.open()
        let first = machine.revoked()
        let second = machine.revoked()
        let stop = machine.serverStopping()
        #expect(first)
        #expect(!second)
        #expect(stop == .none)
    }
}

private final class Reports: Sendable {
    private let reports = Mutex<[RevokedKeys]>([])
    func add(_ revoked: RevokedKeys) { reports.withLock { $0.append(revoked) } }
    var all: [RevokedKeys] { reports.withLock { $0 } }
}

private struct KeyMissing: Error {}
