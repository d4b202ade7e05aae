import Foundation
import JWTKit
import Logging
import Synchronization
import Testing

@testable import RollCallGateway

/// Which open connections a reload of `--jwt-key-file` closes: the decision on the keys' identity alone, then the
/// verifier that records which key checked each token and says what a reload took away.
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
