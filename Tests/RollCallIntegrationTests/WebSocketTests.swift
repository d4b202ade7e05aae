import Foundation
import HummingbirdTLS
import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallGateway
import RollCallTestSupport
import RollCallWire
import Testing
import ZeroMQ

extension Integration {
    @Suite("WebSocket front door")
    struct WebSocketTests {
        /// A phone's session over a WebSocket is seen identically by a ZeroMQ subscriber and a WebSocket
        /// subscriber: the same record bytes, so the same seq, and the last value first on both.
        @Test func sameRecordOnZeroMQAndWebSocket() async throws {
            try await withGateway { gateway in
                let context = try Context()
                let sub = try rawSocket(.sub, gateway.broker.update, context: context)
                try sub.set(.subscribe(Array("presence/phone/".utf8)))
                let zmqLast = try #require(try sub.receive(timeout: 5_000), "ZeroMQ last value")
                let watcher = try await gateway.client(token: gateway.token("watcher"))
                _ = try await watcher.call(
                    #"{"op":"subscribe","id":"s","topics":["presence/phone/"]}"#, id: "s")
                let wsLast = try await watcher.expect { $0.contains(#""topic":"presence/phone/""#) }
                #expect(wsLast == Self.update("presence/phone/", zmqLast[1]))

                let phone = try await gateway.client(token: gateway.token("phone"))
                let hello = try await phone.call(
                    #"{"op":"hello","id":"h","user":"phone","keepalive":"connection"}"#, id: "h")
                #expect(hello[JSONKey("ok")] == .bool(true))
                // The WebSocket's subscription replays the last value on the topic, for the ZeroMQ subscriber too.
                var zmq: [[UInt8]] = []
                while let message = try sub.receive(timeout: 5_000) {
                    zmq = message
                    if String(decoding: message[1], as: UTF8.self).contains(#""status":"online""#) { break }
                }
                try #require(zmq.count == 2, "ZeroMQ update")
                let ws = try await watcher.expect { $0.contains(#""status":"online""#) }
                print("ZeroMQ: \(String(decoding: zmq[1], as: UTF8.self))\nWebSocket: \(ws)")
                #expect(ws == Self.update("presence/phone/", zmq[1]))
                #expect(String(decoding: zmq[1], as: UTF8.self).contains(#""seq":"#))
            }
        }

        /// A user token may say hello only as its own user, and subscribe to exact topics only: `forbidden`
        /// otherwise, and nothing changes.
        @Test func wrongUserIsForbidden() async throws {
            try await withGateway { gateway in
                let mallory = try await gateway.client(token: gateway.token("mallory"))
                let hello = try await mallory.call(#"{"op":"hello","id":"h","user":"alice"}"#, id: "h")
                #expect(Self.code(hello) == "forbidden")
                let all = try await mallory.call(#"{"op":"subscribe","id":"s","topics":["presence/"]}"#, id: "s")
                #expect(Self.code(all) == "forbidden")
                let own = try await mallory.call(#"{"op":"hello","id":"o","user":"mallory"}"#, id: "o")
                #expect(own[JSONKey("ok")] == .bool(true))
                // An operator token may act for anyone.
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                let forAlice = try await admin.call(#"{"op":"hello","id":"a","user":"alice"}"#, id: "a")
                #expect(forAlice[JSONKey("ok")] == .bool(true))
                let client = try gateway.broker.client()
                #expect(try client.query(["alice".id])["alice".id]?.sessions == 1)
            }
        }

        /// Invisible over the WebSocket: another user's WebSocket subscriber and query see the user offline, and no
        /// byte they receive says `invisible`; the user's own connection sees the truth in its query.
        @Test func invisibleRevealsNothingOverWebSocket() async throws {
            try await withGateway { gateway in
                let watcher = try await gateway.client(token: gateway.token("watcher"))
                _ = try await watcher.call(
                    #"{"op":"subscribe","id":"s","topics":["presence/ghost/","broker/"]}"#, id: "s")
                let ghost = try await gateway.client(token: gateway.token("ghost"))
                let hello = try await ghost.call(#"{"op":"hello","id":"h","user":"ghost"}"#, id: "h")
                let session = try #require(hello[JSONKey("session")]?.string)
                _ = try await watcher.expect { $0.contains(#""status":"online""#) }
                _ = try await ghost.call(
                    #"{"op":"status","id":"i","session":"\#(session)","status":"invisible","text":"hiding"}"#, id: "i")
                let offline = try await watcher.expect {
                    $0.contains(#""topic":"presence/ghost/""#) && $0.contains("offline")
                }
                let seen = try await watcher.call(#"{"op":"query","id":"q","users":["ghost"]}"#, id: "q")
                let own = try await ghost.call(#"{"op":"query","id":"q","users":["ghost"]}"#, id: "q")
                var received = [offline, "\(seen)"]
                // What arrives in the next 1.5 s: a broker heartbeat or two, with their counts.
                let until = ContinuousClock.now + .milliseconds(1_500)
                while ContinuousClock.now < until {
                    if let frame = try await watcher.next(timeout: 300) { received.append(frame) }
                }
                #expect(received.contains { $0.contains(#""topic":"broker/""#) })
                print("invisible over WebSocket: \(received.count) frames checked; own query: \(own)")
                #expect(received.allSatisfy { !$0.contains("invisible") && !$0.contains("hiding") })
                #expect("\(own)".contains("invisible"))
            }
        }

        /// A missing, malformed, wrongly signed or expired token gets 401 before the upgrade.
        @Test func badTokensGet401() async throws {
            try await withGateway { gateway in
                let path = "/v1/ws"
                let wrongKey = try await gateway.token("eve", secret: "another-secret-that-is-32-bytes-or-more")
                let expired = try await gateway.token("eve", expiresIn: -60)
                let cases = [
                    ("missing", path), ("malformed", path + "?token=not.a.jwt"),
                    ("wrongly signed", path + "?token=\(wrongKey)"), ("expired", path + "?token=\(expired)"),
                ]
                for (what, target) in cases {
                    let status = try RawWebSocket(port: gateway.port, path: target).status()
                    print("\(what) token: HTTP \(status)")
                    #expect(status == 401, "\(what)")
                }
                let good = try await gateway.token("eve")
                #expect(try RawWebSocket(port: gateway.port, path: path + "?token=\(good)").status() == 101)
            }
        }

        /// A connection whose token expires is closed with 4001, and its session ends by the close path; `auth`
        /// with a fresh token keeps another connection open past its first token's expiry.
        @Test func expiryClosesAndAuthRefreshes() async throws {
            try await withGateway { gateway in
                let watch = try gateway.broker.subscriber("short")
                let short = try await gateway.client(token: gateway.token("short", expiresIn: 2))
                let renewed = try await gateway.client(token: gateway.token("long", expiresIn: 2))
                _ = try await short.call(#"{"op":"hello","id":"h","user":"short","keepalive":"connection"}"#, id: "h")
                try watch.expect("short") { $0.status == .online }
                let fresh = try await gateway.token("long", expiresIn: 600)
                let auth = try await renewed.call(#"{"op":"auth","id":"a","token":"\#(fresh)"}"#, id: "a")
                #expect(auth[JSONKey("ok")] == .bool(true))
                let otherUser = try await gateway.token("someone-else")
                let refused = try await renewed.call(#"{"op":"auth","id":"b","token":"\#(otherUser)"}"#, id: "b")
                #expect(Self.code(refused) == "forbidden")
                let started = ContinuousClock.now
                let code = await short.closeCode(timeout: 10_000)
                print("closed with \(code.map(String.init) ?? "nothing") after \(milliseconds(since: started)) ms")
                #expect(code == 4001)
                let offline = try watch.expect("short", timeout: 5_000) { $0.status == .offline }
                #expect(offline.reason == .closed)
                let ping = try await renewed.call(#"{"op":"ping","id":"p"}"#, id: "p")
                #expect(ping[JSONKey("ok")] == .bool(true))
            }
        }

        /// A client that vanishes without a close frame (its process killed: the kernel closes its socket) is
        /// shown offline at once, by the close path.
        @Test func killedClientGoesOffline() async throws {
            try await withGateway(tokens: false) { gateway in
                let watch = try gateway.broker.subscriber("killed")
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                #expect(try raw.status() == 101)
                try raw.send(#"{"op":"hello","user":"killed","keepalive":"connection"}"#)
                try watch.expect("killed") { $0.status == .online }
                let started = ContinuousClock.now
                raw.kill()
                let record = try watch.expect("killed", timeout: 5_000) { $0.status == .offline }
                let took = milliseconds(since: started)
                print("offline \(took) ms after the kill, reason \(record.reason.map { "\($0)" } ?? "none")")
                #expect(record.reason == .closed)
                #expect(took < 3_000)
            }
        }

        /// A client cut off without a FIN (it answers no ping) is closed after two ping intervals and shown
        /// offline, though its session asked to be kept alive by its connection.
        @Test func unansweredPingsGoOffline() async throws {
            try await withGateway(tokens: false, { $0.webSocket.pingMilliseconds = 300 }) { gateway in
                let watch = try gateway.broker.subscriber("silent")
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                #expect(try raw.status() == 101)
                try raw.send(#"{"op":"hello","user":"silent","keepalive":"connection","ttl_ms":1000}"#)
                try watch.expect("silent") { $0.status == .online }
                let started = ContinuousClock.now
                let record = try watch.expect("silent", timeout: 10_000) { $0.status == .offline }
                let took = milliseconds(since: started)
                print("offline \(took) ms after hello with a 300 ms ping (bound: 2 x ping = 600 ms)")
                #expect(record.reason == .closed)
                #expect(took < 3_000)
            }
        }

        /// A session kept alive by its connection stays online far past its TTL without a single request.
        @Test func keptAliveByConnection() async throws {
            try await withGateway(tokens: false, { $0.webSocket.pingMilliseconds = 200 }) { gateway in
                let watch = try gateway.broker.subscriber("idle")
                let idle = try await gateway.client()
                _ = try await idle.call(
                    #"{"op":"hello","id":"h","user":"idle","ttl_ms":1000,"keepalive":"connection"}"#, id: "h")
                try watch.expect("idle") { $0.status == .online }
                let changes = try watch.collect(for: 3_000)
                print("records in 3 s of silence with a 1 s TTL: \(changes.count)")
                #expect(changes.allSatisfy { $0.status != .offline })
                #expect(try gateway.broker.client().query(["idle".id])["idle".id]?.status == .online)
                idle.close()
                let record = try watch.expect("idle", timeout: 5_000) { $0.status == .offline }
                #expect(record.reason == .closed)
            }
        }

        /// A reader that does not read is closed once its send queue is over its bound, and a reading subscriber
        /// of the same topic gets every update meanwhile.
        @Test func slowReaderIsClosedOthersKeepUp() async throws {
            // The default queue of 1 MiB: the reading subscriber's writer runs on this process's cooperative pool,
            // which the test's blocking sends share, so it needs the slack a loaded machine asks for.
            try await withGateway(tokens: false) { gateway in
                let slow = try RawWebSocket(port: gateway.port, path: "/v1/ws", receiveBuffer: 4_096)
                #expect(try slow.status() == 101)
                try slow.send(#"{"op":"subscribe","topics":["presence/busy/"]}"#)
                let good = try await gateway.client()
                _ = try await good.call(#"{"op":"subscribe","id":"s","topics":["presence/busy/"]}"#, id: "s")
                // More than the slow reader's queue and both kernels' socket buffers (4 MiB here) can hold.
                let pipeline = try RequestPipeline(endpoint: gateway.broker.command)
                let hello = try pipeline.call(.hello(.init(user: "busy".id)))
                let session = SessionID(try #require(hello[JSONKey("session")]?.string))
                let text = String(repeating: "x", count: 256)
                let count = 24_000
                let batch = 200
                let started = ContinuousClock.now
                var received = 0
                var slowestBatch = 0.0
                // In batches that the reading subscriber takes in full before the next, so that it keeps up on this
                // loaded machine; the slow reader reads nothing.
                for first in stride(from: 0, to: count, by: batch) {
                    let batchStarted = ContinuousClock.now
                    for index in first..<(first + batch) {
                        try pipeline.send(
                            Codec.encodeRequest(
                                .status(session: session, status: index % 2 == 0 ? .busy : .away, text: text)))
                    }
                    while received < first + batch + 1 {
                        guard try await good.next(timeout: 5_000) != nil else { break }
                        received += 1
                    }
                    slowestBatch = max(slowestBatch, milliseconds(since: batchStarted))
                }
                let sent = milliseconds(since: started)
                let closed = slow.drainUntilClosed(timeout: 10_000)
                let goodClosed = await good.closeCode(timeout: 100)
                print(
                    "\(count) changes in \(Int(sent)) ms; the reading subscriber got \(received - 1) of them, the "
                        + "slowest batch of \(batch) in \(Int(slowestBatch)) ms; the slow reader was closed after "
                        + "\(closed.map(String.init) ?? "no") bytes")
                #expect(goodClosed == nil)
                #expect(slowestBatch < 3_000)
                #expect(received == count + 1)  // the last value first, then every change
                #expect(closed != nil)
                #expect(closed.map { $0 < 16 * 1_048_576 } == true)
            }
        }

        /// `rollcall serve` stops on SIGTERM within seconds although a WebSocket peer holds its connection open and
        /// never answers the close (it is cut 2 s after the close frame).
        @Test func stopsWithASilentPeer() async throws {
            let serve = try ChildProcess(
                ChildProcess.rollcall, ["serve", "--test-mode", "--ws-endpoint", "127.0.0.1:0", "--print-endpoints"])
            defer { serve.terminate() }
            let line = try serve.waitForOutput(containing: #""ws":"#, timeout: 10_000)
            guard case .object(let endpoints) = try JSONParser.parse(line),
                let url = endpoints[JSONKey("ws")]?.string,
                let port = Int(url.split(separator: ":").last?.split(separator: "/").first ?? "")
            else { throw TestFailure("no ws endpoint in \(line)") }
            let silent = try RawWebSocket(port: port, path: "/v1/ws")
            #expect(try silent.status() == 101)
            let started = ContinuousClock.now
            serve.signal(SIGTERM)
            let status = try serve.waitForExit(timeout: 25_000)
            let took = milliseconds(since: started)
            print("exited \(status.map(String.init) ?? "not") after \(Int(took)) ms with a silent WebSocket peer")
            #expect(status == 0)
            #expect(took < 12_000)  // before the fix it was still running after 32 s
        }

        /// A non-loopback endpoint without tokens, or without TLS, is refused with one clear line unless
        /// --insecure.
        @Test func safeDefaults() throws {
            var c = BrokerConfiguration()
            c.webSocket.endpoint = "0.0.0.0:8080"
            #expect(throws: ConfigurationError.self) { try c.validate() }
            do { try c.validate() } catch { print(error) }
            c.webSocket.jwtKeyFile = "/etc/rollcall/jwt.key"
            #expect(throws: ConfigurationError.self) { try c.validate() }  // tokens, but no TLS
            do { try c.validate() } catch { print(error) }
            var tls = c
            tls.webSocket.tlsCertFile = "/etc/rollcall/ws.crt"
            #expect(throws: ConfigurationError.self) { try tls.validate() }  // a certificate without its key
            tls.webSocket.tlsKeyFile = "/etc/rollcall/ws.key"
            #expect(throws: Never.self) { try tls.validate() }
            c.insecure = true
            #expect(throws: Never.self) { try c.validate() }
            var loopback = BrokerConfiguration()
            loopback.webSocket.endpoint = "127.0.0.1:0"
            #expect(throws: Never.self) { try loopback.validate() }
        }

        static func update(_ topic: String, _ body: [UInt8]) -> String {
            String(decoding: Codec.encodeUpdate(topic: Array(topic.utf8), body: body), as: UTF8.self)
        }

        static func code(_ reply: [JSONKey: JSON]) -> String? {
            guard case .object(let error)? = reply[JSONKey("error")] else { return nil }
            return error[JSONKey("code")]?.string
        }
    }
}

extension Integration {
    @Suite("WebSocket over TLS")
    struct WebSocketTLSTests {
        /// With --ws-tls-cert-file and --ws-tls-key-file the endpoint speaks wss:// (a session works through it, the
        /// client checking the certificate), and a plain ws:// client gets nowhere.
        @Test func wssWorksAndPlainDoesNot() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-tls-\(getpid())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let certificate = directory.appendingPathComponent("cert.pem").path
            let key = directory.appendingPathComponent("key.pem").path
            let made = try await ChildProcess.run(
                "/usr/bin/openssl",
                [
                    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                    "-out", certificate, "-days", "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1",
                ])
            try #require(made.status == 0, "openssl: \(made.stderr)")
            var trust = TLSConfiguration.makeClientConfiguration()
            trust.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(certificate))
            try await withGateway(tls: (certificate, key)) { gateway in
                #expect(gateway.url.hasPrefix("wss://"))
                let client = try await gateway.client(token: gateway.token("tls-user"), trust: trust)
                let hello = try await client.call(#"{"op":"hello","id":"h","user":"tls-user"}"#, id: "h")
                #expect(hello[JSONKey("ok")] == .bool(true))
                let plain = try RawWebSocket(port: gateway.port, path: "/v1/ws?token=\(try await gateway.token("x"))")
                let status = try? plain.status()
                print(
                    "wss: hello answered; plain ws on the TLS port: \(status.map { "HTTP \($0)" } ?? "no HTTP answer")")
                #expect(status == nil)
            }
        }
    }
}

extension Integration {
    @Suite("WebSocket bounds")
    struct WebSocketBoundsTests {
        /// Past --ws-max-connections an upgrade is answered 503; past --ws-max-subscriptions a subscribe is `limit`
        /// and applies nothing.
        @Test func connectionAndSubscriptionCaps() async throws {
            try await withGateway(
                tokens: false,
                {
                    $0.webSocket.maxConnections = 2
                    $0.webSocket.maxSubscriptions = 3
                }
            ) { gateway in
                let first = try await gateway.client()
                let second = try await gateway.client()
                let status = try RawWebSocket(port: gateway.port, path: "/v1/ws").status()
                print("third connection with a cap of 2: HTTP \(status)")
                #expect(status == 503)
                let four = #"["presence/a/","presence/b/","presence/c/","presence/d/"]"#
                let refused = try await first.call(#"{"op":"subscribe","id":"s","topics":\#(four)}"#, id: "s")
                #expect(WebSocketTests.code(refused) == "limit")
                let three = #"["presence/a/","presence/b/","presence/c/"]"#
                let applied = try await first.call(#"{"op":"subscribe","id":"t","topics":\#(three)}"#, id: "t")
                #expect(applied[JSONKey("ok")] == .bool(true))
                let more = try await first.call(#"{"op":"subscribe","id":"u","topics":["broker/"]}"#, id: "u")
                #expect(WebSocketTests.code(more) == "limit")
                second.close()
                #expect(await second.closeCode(timeout: 5_000) != nil)
            }
        }
    }
}
