import Foundation
import Hummingbird
import JWTKit
import Logging
import NIOCore
import RollCallCore
import RollCallWire
import ServiceLifecycle
import Synchronization
import Testing

/// An identity provider's JWKS URL on a free loopback port, served by Hummingbird over real HTTP: its keys change,
/// or it fails, when the test says; each fetch is counted. `Cache-Control: max-age=3600`, so that the broker fetches
/// it only when the test makes it (SIGHUP, a token with an unknown `kid`).
final class JWKSProvider: Sendable {
    private struct State {
        var status: HTTPResponse.Status = .ok
        var body = ""
        var fetches = 0
    }
    private let state = Mutex(State())

    /// Serves a JWKS of these ES256 keys from now on.
    func serve(_ keys: [(ES256PrivateKey, String)]) throws {
        let entries = keys.map { key, kid in
            let p = key.publicKey.parameters!
            return ["kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid, "x": p.x, "y": p.y]
        }
        let body = String(decoding: try JSONSerialization.data(withJSONObject: ["keys": entries]), as: UTF8.self)
        state.withLock {
            $0.status = .ok
            $0.body = body
        }
    }

    /// Answers every fetch from now on with `status` and no JWKS.
    func fail(_ status: HTTPResponse.Status) {
        state.withLock {
            $0.status = status
            $0.body = "unavailable"
        }
    }

    var fetches: Int { state.withLock { $0.fetches } }

    /// Runs `body` with the provider at `http://127.0.0.1:PORT/jwks`, stopped after, whatever happens.
    func run<T>(_ body: (String) async throws -> T) async throws -> T {
        let router = Router()
        router.get("jwks") { [self] _, _ -> Response in
            let (status, text) = state.withLock { state in
                state.fetches += 1
                return (state.status, state.body)
            }
            return Response(
                status: status, headers: [.contentType: "application/json", .cacheControl: "public, max-age=3600"],
                body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        let port = Mutex<Int?>(nil)
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in port.withLock { $0 = channel.localAddress?.port } },
            logger: Logger(label: "jwks-provider"))
        let group = ServiceGroup(configuration: .init(services: [app], logger: Logger(label: "jwks-provider")))
        let server = Task { try await group.run() }
        do {
            try await waitFor(seconds: 10) { port.withLock { $0 } != nil }
            let result = try await body("http://127.0.0.1:\(port.withLock { $0 }!)/jwks")
            await group.triggerGracefulShutdown()
            _ = await server.result
            return result
        } catch {
            await group.triggerGracefulShutdown()
            _ = await server.result
            throw error
        }
    }
}

extension Integration {
    @Suite("WebSocket tokens revoked by a key file reload or a JWKS URL refresh")
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

        /// Three keys from a JWKS URL (`--jwt-jwks-url`, a real HTTP server on loopback), a client with a session on
        /// k1 and one on k2. A fetch that fails (SIGHUP while the provider answers 503) closes nothing: k1's client
        /// still sets a status. The provider drops k1, and a token with the new k3 makes the broker fetch again (an
        /// unknown `kid`): k1's client is closed with 4003 and its user goes offline, reason `revoked`, while k2's
        /// keeps its connection and session. The provider drops k2, and SIGHUP's fetch closes k2's client the same
        /// way; the k3 client stays, and a new k1 token is refused.
        @Test func aKeyTheJWKSURLDropsClosesItsConnections() async throws {
            let (first, second, third) = (ES256PrivateKey(), ES256PrivateKey(), ES256PrivateKey())
            let provider = JWKSProvider()
            try provider.serve([(first, "k1"), (second, "k2")])
            try await provider.run { url in
                try await withGateway(tokens: false, { $0.webSocket.jwtJwksURL = url }) { gateway in
                    let watch = try gateway.broker.subscriber("gone", "kept", "newcomer")
                    let gone = try await gateway.client(token: Self.token("gone", first, kid: "k1"))
                    let kept = try await gateway.client(token: Self.token("kept", second, kid: "k2"))
                    let goneHello = try await gone.call(
                        #"{"op":"hello","id":"h","user":"gone","keepalive":"connection"}"#, id: "h")
                    let keptHello = try await kept.call(
                        #"{"op":"hello","id":"h","user":"kept","keepalive":"connection"}"#, id: "h")
                    let goneSession = try #require(goneHello[JSONKey("session")]?.string)
                    let keptSession = try #require(keptHello[JSONKey("session")]?.string)
                    try watch.expect("gone") { $0.status == .online }
                    try watch.expect("kept") { $0.status == .online }

                    // A failed fetch: the last good keys stay, and the connection is served after it (a revocation
                    // would have reached the connection before this request does).
                    provider.fail(.serviceUnavailable)
                    let before = provider.fetches
                    await gateway.hangup()
                    #expect(provider.fetches == before + 1)
                    let away = try await gone.call(
                        #"{"op":"status","id":"s","session":"\#(goneSession)","status":"away"}"#, id: "s")
                    #expect(away[JSONKey("ok")] == .bool(true))
                    #expect(try watch.expect("gone") { _ in true }.status == .away)

                    // A fetch asked for by an unknown kid drops k1.
                    try provider.serve([(second, "k2"), (third, "k3")])
                    let started = ContinuousClock.now
                    let newcomer = try await gateway.client(token: Self.token("newcomer", third, kid: "k3"))
                    let code = await gone.closeCode(timeout: 5_000)
                    print(
                        "dropped by the JWKS URL: closed with \(code.map(String.init) ?? "nothing") after "
                            + "\(milliseconds(since: started)) ms"
                    )
                    #expect(code == 4003)
                    let offline = try watch.expect("gone", timeout: 5_000) { $0.status == .offline }
                    #expect(offline.reason == .revoked)
                    let busy = try await kept.call(
                        #"{"op":"status","id":"s","session":"\#(keptSession)","status":"busy"}"#, id: "s")
                    #expect(busy[JSONKey("ok")] == .bool(true))
                    #expect(try watch.expect("kept") { _ in true }.status == .busy)
                    let newcomerHello = try await newcomer.call(
                        #"{"op":"hello","id":"h","user":"newcomer","keepalive":"connection"}"#, id: "h")
                    let newcomerSession = try #require(newcomerHello[JSONKey("session")]?.string)
                    try watch.expect("newcomer") { $0.status == .online }

                    // SIGHUP's fetch drops k2.
                    try provider.serve([(third, "k3")])
                    await gateway.hangup()
                    #expect(await kept.closeCode(timeout: 5_000) == 4003)
                    let keptOffline = try watch.expect("kept", timeout: 5_000) { $0.status == .offline }
                    #expect(keptOffline.reason == .revoked)
                    let stays = try await newcomer.call(
                        #"{"op":"status","id":"s","session":"\#(newcomerSession)","status":"busy"}"#, id: "s")
                    #expect(stays[JSONKey("ok")] == .bool(true))
                    #expect(try watch.expect("newcomer") { _ in true }.status == .busy)
                    let stale = try await Self.token("gone", first, kid: "k1")
                    #expect(try RawWebSocket(port: gateway.port, path: "/v1/ws?token=\(stale)").status() == 401)
                }
            }
        }
    }
}
