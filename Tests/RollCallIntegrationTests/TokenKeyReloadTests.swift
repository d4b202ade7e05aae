import Foundation
import JWTKit
import RollCallCore
import RollCallWire
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension Integration {
    @Suite("Token keys reloaded without a restart")
    struct TokenKeyReloadTests {
        static func token(secret: String) async throws -> String {
            let keys = JWTKeyCollection()
            await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
            return try await keys.sign(
                TestClaims(sub: .init(value: "kim"), exp: .init(value: Date(timeIntervalSinceNow: 600)), role: nil))
        }

        /// SIGHUP to `rollcall serve` re-reads `--jwt-key-file`: a file that cannot be used keeps the old secret
        /// (logged); a new secret is taken at once, and the old one's tokens are refused from then on.
        @Test func sighupRereadsTheKeyFile() async throws {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-jwt-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: file) }
            let oldSecret = "the-first-secret-of-more-than-32-bytes-long"
            let newSecret = "the-rotated-secret-of-more-than-32-bytes"
            try oldSecret.write(toFile: file, atomically: true, encoding: .utf8)
            let serve = try ChildProcess(
                ChildProcess.rollcall,
                [
                    "serve", "--test-mode", "--ws-endpoint", "127.0.0.1:0", "--jwt-key-file", file,
                    "--print-endpoints",
                ])
            defer { serve.terminate() }
            let line = try serve.waitForOutput(containing: #""ws":"#, timeout: 10_000)
            guard case .object(let endpoints) = try JSONParser.parse(line),
                let url = endpoints[JSONKey("ws")]?.string,
                let port = Int(url.split(separator: ":").last?.split(separator: "/").first ?? "")
            else { throw TestFailure("no ws endpoint in \(line)") }
            let old = try await Self.token(secret: oldSecret)
            let new = try await Self.token(secret: newSecret)
            func status(_ token: String) throws -> Int {
                try RawWebSocket(port: port, path: "/v1/ws?token=\(token)").status()
            }
            #expect(try status(old) == 101)
            #expect(try status(new) == 401)

            try "too short".write(toFile: file, atomically: true, encoding: .utf8)
            serve.signal(SIGHUP)
            _ = try serve.waitForOutput(containing: "token key file NOT reloaded", inStderr: true, timeout: 10_000)
            #expect(try status(old) == 101)

            try newSecret.write(toFile: file, atomically: true, encoding: .utf8)
            serve.signal(SIGHUP)
            _ = try serve.waitForOutput(containing: "token key file reloaded", inStderr: true, timeout: 10_000)
            #expect(try status(new) == 101)
            #expect(try status(old) == 401)
            serve.signal(SIGTERM)
            #expect(try serve.waitForExit(timeout: 15_000) == 0)
        }

        /// `rollcall serve --jwt-jwks-url` follows an identity provider's rotation (a JWKS served by python3's
        /// http.server): a token signed with a key added after the start is accepted on its first try; with the
        /// provider gone, SIGHUP's fetch fails and the last good keys still check tokens.
        @Test func jwksURLRotationWithoutARestart() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-jwks-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let jwksFile = directory.appendingPathComponent("jwks.json").path
            let first = ES256PrivateKey()
            let second = ES256PrivateKey()
            func publish(_ keys: [(ES256PrivateKey, String)]) throws {
                let entries = keys.map { key, kid in
                    let p = key.publicKey.parameters!
                    return ["kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid, "x": p.x, "y": p.y]
                }
                try JSONSerialization.data(withJSONObject: ["keys": entries]).write(
                    to: URL(fileURLWithPath: jwksFile), options: .atomic)
            }
            func token(_ key: ES256PrivateKey, kid: String) async throws -> String {
                let keys = JWTKeyCollection()
                await keys.add(ecdsa: key, kid: JWKIdentifier(string: kid))
                return try await keys.sign(
                    TestClaims(sub: .init(value: "kim"), exp: .init(value: Date(timeIntervalSinceNow: 600)), role: nil),
                    kid: JWKIdentifier(string: kid))
            }
            try publish([(first, "k1")])
            let provider = try ChildProcess(
                "/usr/bin/env",
                ["python3", "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory", directory.path, "0"])
            defer { provider.terminate() }
            let serving = try provider.waitForOutput(containing: "Serving HTTP", timeout: 10_000)
            guard let providerPort = serving.split(separator: " ").compactMap({ Int($0) }).first(where: { $0 > 0 })
            else { throw TestFailure("no port in \(serving)") }
            let serve = try ChildProcess(
                ChildProcess.rollcall,
                [
                    "serve", "--test-mode", "--ws-endpoint", "127.0.0.1:0", "--print-endpoints", "--jwt-jwks-url",
                    "http://127.0.0.1:\(providerPort)/jwks.json",
                ])
            defer { serve.terminate() }
            let line = try serve.waitForOutput(containing: #""ws":"#, timeout: 15_000)
            guard case .object(let endpoints) = try JSONParser.parse(line),
                let url = endpoints[JSONKey("ws")]?.string,
                let port = Int(url.split(separator: ":").last?.split(separator: "/").first ?? "")
            else { throw TestFailure("no ws endpoint in \(line)") }
            func status(_ token: String) throws -> Int {
                try RawWebSocket(port: port, path: "/v1/ws?token=\(token)").status()
            }
            let old = try await token(first, kid: "k1")
            let new = try await token(second, kid: "k2")
            #expect(try status(old) == 101)

            try publish([(second, "k2")])
            #expect(try status(new) == 101)

            provider.terminate()
            #expect(try provider.waitForExit(timeout: 10_000) != nil)
            let hangup = ContinuousClock.now
            serve.signal(SIGHUP)
            _ = try serve.waitForOutput(containing: "jwks fetch failed", inStderr: true, timeout: 15_000)
            let failedAfter = ContinuousClock.now - hangup
            print("with the provider gone, SIGHUP's fetch failed after \(failedAfter)")
            // A refused connection fails the fetch at once, not at the 5 s timeout (before: 10 s, AHC's retries).
            #expect(failedAfter < .seconds(3))
            #expect(try status(new) == 101)
            serve.signal(SIGTERM)
            #expect(try serve.waitForExit(timeout: 15_000) == 0)
        }
    }
}
