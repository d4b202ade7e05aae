import Foundation
import Hummingbird
import JWTKit
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization
import Testing

@testable import RollCallGateway

/// A JWKS URL served in-process over real HTTP, whose keys rotate while the verifier runs.
@Suite struct JWKSSourceTests {
    /// What the endpoint serves, and how often it was asked.
    final class Endpoint: Sendable {
        struct State {
            var status: HTTPResponse.Status = .ok
            var body = ""
            var fetches = 0
        }
        let state = Mutex(State())

        func serve(_ body: String) { state.withLock { $0 = State(status: .ok, body: body, fetches: $0.fetches) } }
        func fail(_ status: HTTPResponse.Status, body: String = "") {
            state.withLock { $0 = State(status: status, body: body, fetches: $0.fetches) }
        }
        var fetches: Int { state.withLock { $0.fetches } }
    }

    /// Runs `body` with a JWKS endpoint on a free loopback port (`http://127.0.0.1:PORT/jwks`), stopped after.
    static func withEndpoint(
        _ endpoint: Endpoint, _ body: (String) async throws -> Void
    ) async throws {
        let router = Router()
        router.get("jwks") { _, _ -> Response in
            let (status, text) = endpoint.state.withLock { state in
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
            logger: Logger(label: "jwks-endpoint"))
        let group = ServiceGroup(
            configuration: .init(services: [app], logger: Logger(label: "jwks-endpoint")))
        let server = Task { try await group.run() }
        defer { server.cancel() }
        let deadline = ContinuousClock.now + .seconds(10)
        var bound: Int?
        while bound == nil {
            bound = port.withLock { $0 }
            guard ContinuousClock.now < deadline else { throw CancellationError() }
            if bound == nil { try await Task.sleep(for: .milliseconds(5)) }
        }
        try await body("http://127.0.0.1:\(bound!)/jwks")
        await group.triggerGracefulShutdown()
        _ = await server.result
    }

    /// A token signed with a key the identity provider added after the start is accepted at once, without a
    /// restart (its unknown `kid` fetches the JWKS again); the key it dropped stops working; an unknown `kid`
    /// within 10 s of that fetch does not fetch again; a failing endpoint, or one that serves no JWKS, keeps the
    /// last good keys.
    @Test func keysRotateWithoutARestart() async throws {
        let first = ES256PrivateKey()
        let second = ES256PrivateKey()
        let endpoint = Endpoint()
        endpoint.serve(try TokenMint.jwks([(first, "k1")]))
        try await Self.withEndpoint(endpoint) { url in
            let source = JWKSSource(url: url, logger: Logger(label: "jwks"))
            try await source.start()
            #expect(endpoint.fetches == 1)
            let verifier = try await TokenVerifier(
                keyFile: nil, jwks: source, rules: .init(), logger: Logger(label: "tokens"))
            let now = Date().timeIntervalSince1970
            let claims = TokenMint.claims(now: now)
            let oldToken = try await TokenMint.ecdsa(first, kid: "k1").token(claims)
            let newToken = try await TokenMint.ecdsa(second, kid: "k2").token(claims)
            #expect(try await verifier.verify(oldToken, now: now).user.description == "alice")
            #expect(endpoint.fetches == 1)

            endpoint.serve(try TokenMint.jwks([(second, "k2")]))
            #expect(try await verifier.verify(newToken, now: now).user.description == "alice")
            #expect(endpoint.fetches == 2)
            await #expect(throws: TokenVerifier.Refusal.self) { try await verifier.verify(oldToken, now: now) }
            let unknown = try await TokenMint.ecdsa(first, kid: "k3").token(claims)
            await #expect(throws: TokenVerifier.Refusal.self) { try await verifier.verify(unknown, now: now) }
            #expect(endpoint.fetches == 2, "an unknown kid within 10 s of the last such fetch fetches nothing")

            for (status, body) in [
                (HTTPResponse.Status.internalServerError, ""), (.ok, "<html>"), (.ok, #"{"keys":[]}"#),
            ] {
                endpoint.fail(status, body: body)
                let before = endpoint.fetches
                await source.refreshNow()
                #expect(endpoint.fetches == before + 1)
                #expect(
                    try await verifier.verify(newToken, now: now).user.description == "alice", "after \(status) \(body)"
                )
            }
        }
    }

    /// The refresher runs as a service and returns promptly when its group shuts down gracefully.
    @Test func stopsWithItsServiceGroup() async throws {
        let endpoint = Endpoint()
        endpoint.serve(try TokenMint.jwks([(ES256PrivateKey(), "k1")]))
        try await Self.withEndpoint(endpoint) { url in
            let source = JWKSSource(url: url, logger: Logger(label: "jwks"))
            try await source.start()
            let group = ServiceGroup(configuration: .init(services: [source], logger: Logger(label: "group")))
            let running = Task { try await group.run() }
            await group.triggerGracefulShutdown()
            let started = ContinuousClock.now
            let stopped = try await withThrowingTaskGroup(of: Bool.self) { tasks in
                tasks.addTask {
                    try await running.value
                    return true
                }
                tasks.addTask {
                    try await Task.sleep(for: .seconds(10))
                    return false
                }
                defer { tasks.cancelAll() }
                return try await tasks.next() ?? false
            }
            print("the JWKS refresher stopped \(ContinuousClock.now - started) after the shutdown began")
            #expect(stopped, "still running 10 s after the graceful shutdown began")
            running.cancel()
        }
    }

    /// A URL that gives no usable JWKS at start stops the start.
    @Test func noJWKSAtStartIsAnError() async throws {
        let endpoint = Endpoint()
        endpoint.fail(.notFound)
        try await Self.withEndpoint(endpoint) { url in
            let source = JWKSSource(url: url, logger: Logger(label: "jwks"))
            await #expect(throws: TokenKeySet.KeyError.self) { try await source.start() }
        }
    }

    /// Keys from a key file and from a JWKS URL are both accepted.
    @Test func keyFileAndJWKSTogether() async throws {
        let key = ES256PrivateKey()
        let endpoint = Endpoint()
        endpoint.serve(try TokenMint.jwks([(key, "idp")]))
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-jwt-\(UUID())").path
        try TokenMint.secret.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        try await Self.withEndpoint(endpoint) { url in
            let source = JWKSSource(url: url, logger: Logger(label: "jwks"))
            try await source.start()
            let verifier = try await TokenVerifier(
                keyFile: file, jwks: source, rules: .init(), logger: Logger(label: "tokens"))
            let now = Date().timeIntervalSince1970
            let fromIdP = try await TokenMint.ecdsa(key, kid: "idp").token(TokenMint.claims("bob", now: now))
            let fromBackend = try await TokenMint.hmac().token(TokenMint.claims("carol", now: now))
            #expect(try await verifier.verify(fromIdP, now: now).user.description == "bob")
            #expect(try await verifier.verify(fromBackend, now: now).user.description == "carol")
        }
    }

    /// SIGHUP's reload takes a key file's new key; a file that cannot be used keeps the old one.
    @Test func keyFileReload() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-jwt-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let newSecret = "the-rotated-secret-of-more-than-32-bytes"
        try TokenMint.secret.write(toFile: file, atomically: true, encoding: .utf8)
        let verifier = try await TokenVerifier(
            keyFile: file, jwks: nil, rules: .init(), logger: Logger(label: "tokens"))
        let now = Date().timeIntervalSince1970
        let old = try await TokenMint.hmac().token(TokenMint.claims(now: now))
        let new = try await TokenMint.hmac(newSecret).token(TokenMint.claims(now: now))
        #expect((try? await verifier.verify(old, now: now)) != nil)
        #expect((try? await verifier.verify(new, now: now)) == nil)

        try "too short".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(await verifier.reloadKeyFile() != nil)
        #expect((try? await verifier.verify(old, now: now)) != nil)

        try newSecret.write(toFile: file, atomically: true, encoding: .utf8)
        #expect(await verifier.reloadKeyFile() == nil)
        #expect((try? await verifier.verify(new, now: now)) != nil)
        #expect((try? await verifier.verify(old, now: now)) == nil)
    }
}
