import Foundation
import JWTKit
import RollCallCore
import RollCallWire
import Testing

extension Integration {
    @Suite("WebSocket tokens revoked by a key file reload")
    struct WebSocketRevocationTests {
        /// Writes a JWKS file of these ES256 keys.
        static func publish(_ keys: [(ES256PrivateKey, String)], to file: String) throws {
            let entries = keys.map { key, kid in
                let p = key.publicKey.parameters!
                return ["kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid, "x": p.x, "y": p.y]
            }
            try JSONSerialization.data(withJSONObject: ["keys": entries]).write(
                to: URL(fileURLWithPath: file), options: .atomic)
        }

        static func token(_ user: String, _ key: ES256PrivateKey, kid: String) async throws -> String {
            let keys = JWTKeyCollection()
            await keys.add(ecdsa: key, kid: JWKIdentifier(string: kid))
            return try await keys.sign(
                TestClaims(sub: .init(value: user), exp: .init(value: Date(timeIntervalSinceNow: 600)), role: nil),
                kid: JWKIdentifier(string: kid))
        }

        /// Two keys in a JWKS key file, a client of each with a session; k1 is removed from the file and the broker
        /// reloads (SIGHUP): k1's client is closed with 4003 and its user goes offline, reason `revoked`, as a
        /// subscriber sees it; k2's client keeps its connection and its session (it sets a status that the
        /// subscriber sees), and a new k1 token is refused.
        @Test func aRemovedKeyClosesItsConnectionsAndEndsTheirSessions() async throws {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-jwks-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: file) }
            let (first, second) = (ES256PrivateKey(), ES256PrivateKey())
            try Self.publish([(first, "k1"), (second, "k2")], to: file)
            try await withGateway(keyFile: file) { gateway in
                let watch = try gateway.broker.subscriber("gone", "kept")
                let gone = try await gateway.client(token: Self.token("gone", first, kid: "k1"))
                let kept = try await gateway.client(token: Self.token("kept", second, kid: "k2"))
                _ = try await gone.call(#"{"op":"hello","id":"h","user":"gone","keepalive":"connection"}"#, id: "h")
                let hello = try await kept.call(
                    #"{"op":"hello","id":"h","user":"kept","keepalive":"connection"}"#, id: "h")
                let session = try #require(hello[JSONKey("session")]?.string)
                try watch.expect("gone") { $0.status == .online }
                try watch.expect("kept") { $0.status == .online }

                try Self.publish([(second, "k2")], to: file)
                let started = ContinuousClock.now
                await gateway.hangup()
                let code = await gone.closeCode(timeout: 5_000)
                print(
                    "revoked: closed with \(code.map(String.init) ?? "nothing") after \(milliseconds(since: started)) ms"
                )
                #expect(code == 4003)
                let offline = try watch.expect("gone", timeout: 5_000) { $0.status == .offline }
                #expect(offline.reason == .revoked)

                #expect(await kept.closeCode(timeout: 200) == nil)
                let busy = try await kept.call(
                    #"{"op":"status","id":"s","session":"\#(session)","status":"busy"}"#, id: "s")
                #expect(busy[JSONKey("ok")] == .bool(true))
                let record = try watch.expect("kept") { _ in true }
                #expect(record.status == .busy)
                let stale = try await Self.token("gone", first, kid: "k1")
                #expect(try RawWebSocket(port: gateway.port, path: "/v1/ws?token=\(stale)").status() == 401)
            }
        }
    }
}
