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
    }
}
