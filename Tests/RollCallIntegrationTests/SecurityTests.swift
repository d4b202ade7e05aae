import Foundation
import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallSecurity
import RollCallTestSupport
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

/// Keys for one test: the broker's pair and clients' pairs, by name, with the credentials each client uses.
struct TestKeys {
    let server: (publicKey: String, secretKey: String)
    private(set) var pairs: [String: (publicKey: String, secretKey: String)] = [:]

    init(_ names: String...) throws { try self.init(names: names) }

    init(names: [String]) throws {
        server = try Curve.keyPair()
        for name in names { pairs[name] = try Curve.keyPairForKeyFiles() }
    }

    func credentials(_ name: String) -> CurveCredentials {
        CurveCredentials(
            serverKey: server.publicKey, publicKey: pairs[name]!.publicKey, secretKey: pairs[name]!.secretKey)
    }

    /// An authorized-keys file's text: one line per `(name, role)`.
    func table(_ entries: [(String, String)]) -> String {
        "# public key                                role\n"
            + entries.map { "\(pairs[$0.0]!.publicKey)   \($0.1)" }.joined(separator: "\n") + "\n"
    }

    func authorizedKeys(_ entries: [(String, String)]) throws -> AuthorizedKeys {
        try AuthorizedKeys(parsing: table(entries))
    }
}

extension Integration {
    @Suite("Security: CURVE, keys bound to users, authorization")
    struct SecurityTests {
        static let roles = [
            ("alice", "user alice"), ("bob", "user bob"), ("op", "operator"), ("reader", "reader"),
        ]

        /// Runs `body` with an in-process broker running CURVE with `roles`' keys (and a `stranger` key unknown to
        /// it).
        func withCurveBroker<T>(
            _ keys: TestKeys, _ body: (InProcessBroker) async throws -> T
        ) async throws -> T {
            let table = try keys.authorizedKeys(Self.roles)
            return try await withBroker({
                $0.curve = CurveSettings(secretKey: keys.server.secretKey, authorizedKeys: table)
            }) { try await body($0) }
        }

        /// A `user` key may act only as its user: hello for another user, touching another user's session, and
        /// editing groups are `forbidden` and change nothing; what it may do works.
        @Test func userKeyActsOnlyAsItsUser() async throws {
            let keys = try TestKeys("alice", "bob", "op", "reader", "stranger")
            try await withCurveBroker(keys) { broker in
                let alice = try CommandClient(endpoint: broker.command, credentials: keys.credentials("alice"))
                let bob = try CommandClient(endpoint: broker.command, credentials: keys.credentials("bob"))
                let op = try CommandClient(endpoint: broker.command, credentials: keys.credentials("op"))
                let reader = try CommandClient(endpoint: broker.command, credentials: keys.credentials("reader"))

                #expect(throws: ClientError.self) { try alice.hello(.init(user: "bob".id)) }
                do {
                    _ = try alice.hello(.init(user: "bob".id))
                } catch let ClientError.rejected(error) {
                    #expect(error.code == .forbidden)
                    #expect(error.message.contains("alice"))
                    print("forbidden message: \(error.message)")
                }
                #expect(try alice.query(["bob".id])["bob".id]?.status == .offline)

                let own = try alice.hello(.init(user: "alice".id))
                let bobs = try bob.hello(.init(user: "bob".id, status: .busy))
                try alice.setStatus(own.session, .away)
                #expect(rejection(of: { try alice.setStatus(bobs.session, .offline) }) == .forbidden)
                #expect(rejection(of: { try alice.bye(bobs.session) }) == .forbidden)
                #expect(rejection(of: { try alice.heartbeat(bobs.session) }) == .forbidden)
                #expect(try op.query(["bob".id])["bob".id]?.status == .busy)  // unchanged

                // An operator acts for anyone; a reader only reads.
                try op.setStatus(bobs.session, .online)
                #expect(rejection(of: { _ = try reader.hello(.init(user: "reader".id)) }) == .forbidden)
                #expect(rejection(of: { try reader.heartbeat(own.session) }) == .forbidden)
                #expect(try reader.query(["bob".id])["bob".id]?.status == .online)
                #expect(try reader.ping().version == rollCallVersion)

                // Groups: only operators define and delete; everyone reads.
                #expect(
                    rejection(of: { _ = try alice.group("team".group, GroupEdit(members: ["alice".id])) }) == .forbidden
                )
                #expect(
                    rejection(of: { _ = try reader.group("team".group, GroupEdit(members: ["alice".id])) })
                        == .forbidden)
                _ = try op.group("team".group, GroupEdit(members: ["alice".id, "bob".id]))
                #expect(try alice.group("team".group).counts.available == 2)
                #expect(rejection(of: { try alice.ungroup("team".group) }) == .forbidden)
                #expect(try op.ungroup("team".group))
            }
        }

        /// A key that is not in the table, and a client without CURVE, get nothing on either endpoint: no reply,
        /// no record, and the client learns why from its handshake.
        @Test func unknownKeyAndNullClientGetNothing() async throws {
            let keys = try TestKeys("alice", "bob", "op", "reader", "stranger")
            try await withCurveBroker(keys) { broker in
                let stranger = try CommandClient(
                    endpoint: broker.command, timeoutMilliseconds: 1_000, credentials: keys.credentials("stranger"))
                #expect(
                    throws: ClientError.refused(
                        "the broker refused this key: it is not in the broker's authorized keys")
                ) {
                    try stranger.ping()
                }
                let plain = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 1_000)
                do {
                    _ = try plain.ping()
                    Issue.record("a NULL-mechanism client got a reply from a CURVE broker")
                } catch let ClientError.refused(reason) {
                    print("NULL client: \(reason)")
                }

                let strangerWatch = try PresenceSubscriber(
                    endpoint: broker.update, credentials: keys.credentials("stranger"))
                let plainWatch = try PresenceSubscriber(endpoint: broker.update)
                let readerWatch = try PresenceSubscriber(
                    endpoint: broker.update, credentials: keys.credentials("reader"))
                for watch in [strangerWatch, plainWatch, readerWatch] {
                    try watch.subscribe(prefix: Array("presence/".utf8))
                    try watch.subscribe("alice".id)
                    try watch.subscribe(prefix: Array("broker/".utf8))
                }
                let alice = try CommandClient(endpoint: broker.command, credentials: keys.credentials("alice"))
                // The reader's subscriptions are in once alice's last value is here; the others' never are (their
                // handshakes fail), which the silence below checks.
                try readerWatch.expect("alice") { _ in true }
                _ = try alice.hello(.init(user: "alice".id))
                try readerWatch.expect("alice") { $0.status == .online }
                #expect(try strangerWatch.nextMessage(timeout: 1_200) == nil)
                #expect(try plainWatch.nextMessage(timeout: 200) == nil)
            }
        }

        /// A watcher whose key the broker refuses says so (a `failed` broker event naming the key), instead of
        /// waiting in silence: libzmq tells a subscriber only through its socket monitor.
        @Test func refusedWatcherSaysSo() async throws {
            let keys = try TestKeys("alice", "bob", "op", "reader", "stranger")
            try await withCurveBroker(keys) { broker in
                let watcher = try PresenceWatcher(endpoint: broker.update, credentials: keys.credentials("stranger"))
                defer { watcher.close() }
                let events = Mutex<[PresenceWatcher.BrokerEvent]>([])
                _ = watcher.observeBroker { event in events.withLock { $0.append(event) } }
                let started = ContinuousClock.now
                try await waitFor(seconds: 5) { events.withLock { !$0.isEmpty } }
                let first = try #require(events.withLock { $0.first })
                #expect(first == .failed("the broker refused this key: it is not in the broker's authorized keys"))
                print("refused watcher: told after \(Int(milliseconds(since: started))) ms")
            }
        }

        /// A `user` key's subscriptions to prefixes that are not one exact topic (`presence/`, `presence/bo`, the
        /// empty prefix, `group/`) are not applied, while its exact topics work, their last value included; a
        /// reader's `presence/` gets everyone.
        @Test func userSubscribesToExactTopicsOnly() async throws {
            let keys = try TestKeys("alice", "bob", "op", "reader", "stranger")
            try await withCurveBroker(keys) { broker in
                // Each connection's subscriptions are read in order: once a later exact topic's last value (carol's)
                // is here, the prefixes before it have been dealt with.
                let prefixes = try PresenceSubscriber(endpoint: broker.update, credentials: keys.credentials("alice"))
                for prefix in ["presence/", "presence/bo", "", "group/"] {
                    try prefixes.subscribe(prefix: Array(prefix.utf8))
                }
                try prefixes.subscribe("carol".id)
                try prefixes.expect("carol") { _ in true }
                let exact = try PresenceSubscriber(endpoint: broker.update, credentials: keys.credentials("alice"))
                let reader = try PresenceSubscriber(endpoint: broker.update, credentials: keys.credentials("reader"))
                try reader.subscribe(prefix: Array("presence/".utf8))
                try reader.subscribe("carol".id)
                try reader.expect("carol") { _ in true }
                let bob = try CommandClient(endpoint: broker.command, credentials: keys.credentials("bob"))
                let granted = try bob.hello(.init(user: "bob".id))
                try exact.subscribe("bob".id)
                try exact.expect("bob") { $0.status == .online }  // the last value on subscribe
                try bob.setStatus(granted.session, .away)
                try exact.expect("bob") { $0.status == .away }
                try reader.expect("bob") { $0.status == .away }
                // carol's change after bob's: the prefixes' connection gets it, and nothing before it.
                let carol = try CommandClient(endpoint: broker.command, credentials: keys.credentials("op"))
                _ = try carol.hello(.init(user: "carol".id))
                var (leaked, marked) = ([String](), false)
                let deadline = ContinuousClock.now + .seconds(3)
                while !marked, ContinuousClock.now < deadline {
                    guard let message = try prefixes.nextMessage(timeout: 100) else { continue }
                    if baseTopic(message.topic) == "presence/carol/" {
                        marked = true
                    } else {
                        leaked.append(message.topic)
                    }
                }
                #expect(marked, "carol's change never reached her exact topic")
                #expect(leaked.isEmpty, "a user key's prefix subscription received \(leaked)")
            }
        }

        /// A `user` key's raw XSUB that sends messages that are not subscriptions (which skew libzmq 4.3.4's
        /// manual-mode bookkeeping) between readers' `presence/` subscriptions never ends up with a prefix: it
        /// receives its own exact topic and nothing of anyone else.
        @Test func strayMessagesCannotBorrowAReadersSubscription() async throws {
            let keys = try TestKeys("alice", "bob", "op", "reader", "stranger")
            try await withCurveBroker(keys) { broker in
                let context = try Context()
                let hostile = try Socket(context, .xsub)
                try hostile.set(.linger(milliseconds: 0))
                try keys.credentials("alice").apply(to: hostile)
                try hostile.connect(broker.update)
                var readers: [PresenceSubscriber] = []
                for round in 0..<20 {
                    _ = try hostile.send(Array("junk \(round)".utf8))
                    _ = try hostile.send([])
                    let reader = try PresenceSubscriber(
                        endpoint: broker.update, credentials: keys.credentials("reader"))
                    try reader.subscribe(prefix: Array("presence/".utf8))
                    readers.append(reader)
                    _ = try hostile.send([1] + Array("presence/alice/".utf8))
                }
                // Subscriptions read with stray messages in the queue are not applied at all; one made once the
                // queue is read works: new readers until one gets carol's last value (its presence/ prefix is read
                // before that topic), within a deadline.
                var live: PresenceSubscriber?
                let deadline = ContinuousClock.now + .seconds(10)
                while live == nil {
                    guard ContinuousClock.now < deadline else { throw TestFailure("no reader's subscription worked") }
                    let candidate = try PresenceSubscriber(
                        endpoint: broker.update, credentials: keys.credentials("reader"))
                    try candidate.subscribe(prefix: Array("presence/".utf8))
                    try candidate.subscribe("carol".id)
                    if (try? candidate.expect("carol", timeout: 500) { _ in true }) != nil { live = candidate }
                }
                let reader = try #require(live)
                let bob = try CommandClient(endpoint: broker.command, credentials: keys.credentials("bob"))
                _ = try bob.hello(.init(user: "bob".id))
                try reader.expect("bob") { $0.status == .online }
                var received: [String] = []
                while let message = try hostile.receive(timeout: 300) {
                    received.append(String(decoding: message[0], as: UTF8.self))
                }
                #expect(
                    received.allSatisfy { baseTopic($0) == "presence/alice/" }, "the hostile key received \(received)")
                print("stray messages: the hostile XSUB received \(received.count) messages, all its own topic")
            }
        }

        /// Invisible: to everyone else the user looks exactly as if the invisible session did not exist (offline,
        /// `last_seen` frozen when they went invisible, counted offline in groups and in the broker heartbeat), and
        /// no byte anyone else receives says `invisible`; the user's own connection and operators see the truth.
        @Test func invisibleRevealsNothing() async throws {
            let keys = try TestKeys("alice", "bob", "op", "reader", "stranger")
            try await withCurveBroker(keys) { broker in
                let op = try CommandClient(endpoint: broker.command, credentials: keys.credentials("op"))
                _ = try op.group("friends".group, GroupEdit(members: ["alice".id, "bob".id]))
                let everything = try PresenceSubscriber(
                    endpoint: broker.update, credentials: keys.credentials("reader"))
                try everything.subscribe(prefix: [])
                let bobWatch = try PresenceSubscriber(endpoint: broker.update, credentials: keys.credentials("bob"))
                try bobWatch.subscribe("alice".id)
                try bobWatch.expect("alice") { _ in true }  // the last value: the subscription is in
                // Everything anyone else could receive from here on: records, group messages, broker heartbeats.
                var messages: [(topic: String, body: [UInt8])] = []
                /// Reads `everything` until `stop` holds for a message, within `seconds`.
                func read(seconds: Int, until stop: (String, [UInt8]) -> Bool) throws {
                    let deadline = ContinuousClock.now + .seconds(seconds)
                    while ContinuousClock.now < deadline {
                        guard let message = try everything.nextMessage(timeout: 100) else { continue }
                        messages.append(message)
                        if stop(message.topic, message.body) { return }
                    }
                    throw TestFailure("the awaited message did not come within \(seconds) s")
                }
                try read(seconds: 5) { topic, _ in topic == "broker/" }  // a heartbeat: the subscription is in

                let alice = try CommandClient(endpoint: broker.command, credentials: keys.credentials("alice"))
                let session = try alice.hello(.init(user: "alice".id))
                try bobWatch.expect("alice") { $0.status == .online }
                try alice.setStatus(session.session, .invisible, text: "hiding")
                let hidden = try bobWatch.expect("alice") { $0.status == .offline }
                #expect(hidden.reason == .bye)  // what the session saying bye would have published
                #expect(hidden.sessions == 0 && hidden.text == nil)

                // Heartbeats go on and nothing moves: the reader sees alice's offline record, then a heartbeat after it.
                try read(seconds: 5) { topic, body in
                    baseTopic(topic) == "presence/alice/" && (try? Codec.decodeRecord(body))?.reason == .bye
                }
                try read(seconds: 5) { topic, _ in topic == "broker/" }
                try alice.heartbeat(session.session)
                let bob = try CommandClient(endpoint: broker.command, credentials: keys.credentials("bob"))
                let seen = try #require(try bob.query(["alice".id])["alice".id])
                #expect(seen.status == .offline && seen.lastSeen == hidden.lastSeen && seen.seq == hidden.seq)
                #expect(try bob.group("friends".group).counts.available == 0)

                // The truth: the user's own connection and operators.
                #expect(try alice.query(["alice".id])["alice".id]?.status == .invisible)
                #expect(try op.query(["alice".id])["alice".id]?.status == .invisible)

                while let message = try everything.nextMessage(timeout: 300) { messages.append(message) }
                let heartbeats = messages.filter { $0.topic == "broker/" }
                #expect(!heartbeats.isEmpty)
                for message in messages {
                    let text = String(decoding: message.body, as: UTF8.self)
                    #expect(!text.contains("invisible"), "\(message.topic) revealed it: \(text)")
                    #expect(!text.contains("hiding"), "\(message.topic) revealed the text: \(text)")
                }
                let last = try #require(heartbeats.last)
                let heartbeat = try Codec.decodeBrokerHeartbeat(last.body)
                #expect(heartbeat.sessions == 0 && heartbeat.usersAvailable == 0)
                print("invisible: \(messages.count) messages checked, none revealing")

                // Coming back is an ordinary change.
                try alice.setStatus(session.session, .online)
                try bobWatch.expect("alice") { $0.status == .online && $0.sessions == 1 }
            }
        }
    }
}

/// The error code a call was refused with, or `nil` if it succeeded or failed otherwise.
func rejection<T>(_ call: () throws -> T) -> ErrorCode? {
    do {
        _ = try call()
        return nil
    } catch let ClientError.rejected(error) {
        return error.code
    } catch {
        return nil
    }
}

/// ``rejection(_:)`` of a call that returns nothing.
func rejection(of call: () throws -> Void) -> ErrorCode? { rejection(call) }

extension Integration {
    @Suite("Security: the rollcall serve process")
    struct SecurityProcessTests {
        /// SIGHUP reloads the authorized-keys file without a restart: a removed key's connection is closed (its
        /// session ends, reason `revoked`) and it cannot connect again; an added key works; a malformed file keeps the table
        /// it had, and the broker says which line is wrong.
        @Test func reloadRevokesAndAdds() async throws {
            let keys = try TestKeys("alice", "carol", "op")
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-keys-\(getpid())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let secret = directory.appendingPathComponent("broker.key").path
            let table = directory.appendingPathComponent("authorized_keys").path
            let certificate = Certificate(
                publicKey: CurveKey(keys.server.publicKey)!, secretKey: CurveKey(keys.server.secretKey)!)
            try CertificateFile.create(certificate, at: secret)
            try keys.table([("alice", "user alice"), ("op", "operator")]).write(
                toFile: table, atomically: true, encoding: .utf8)
            let broker = try ChildProcess(
                ChildProcess.rollcall,
                [
                    "serve", "--ephemeral", "--command-endpoint", "tcp://127.0.0.1:*", "--update-endpoint",
                    "tcp://127.0.0.1:*", "--curve-secret-key-file", secret, "--authorized-keys", table,
                ])
            defer { broker.terminate() }
            let started = try broker.waitForOutput(containing: "broker started", inStderr: true, timeout: 10_000)
            #expect(started.contains("public_key=\(keys.server.publicKey)"))
            let command = try #require(
                started.firstMatch(of: /command=(tcp:\/\/[0-9.]+:[0-9]+)/).map { String($0.1) })

            let alice = try CommandClient(
                endpoint: command, timeoutMilliseconds: 1_000, credentials: keys.credentials("alice"))
            let session = try alice.hello(.init(user: "alice".id))
            let carol = try CommandClient(
                endpoint: command, timeoutMilliseconds: 500, credentials: keys.credentials("carol"))
            #expect(throws: ClientError.self) { try carol.ping() }

            // Alice out, Carol in.
            try keys.table([("carol", "user carol"), ("op", "operator")]).write(
                toFile: table, atomically: true, encoding: .utf8)
            let reloaded = ContinuousClock.now
            broker.signal(SIGHUP)
            try broker.waitForOutput(containing: "authorized keys reloaded", inStderr: true)
            let fresh = try CommandClient(
                endpoint: command, timeoutMilliseconds: 2_000, credentials: keys.credentials("carol"))
            _ = try fresh.hello(.init(user: "carol".id))
            print("reload: a new key works \(Int(milliseconds(since: reloaded))) ms after SIGHUP")
            // Alice's connection was closed at the reload (her session ended, reason revoked), and her client
            // cannot connect again.
            let refusal = ClientError.refused("the broker refused this key: it is not in the broker's authorized keys")
            #expect(throws: refusal) { try alice.heartbeat(session.session) }
            #expect(try fresh.query(["alice".id])["alice".id]?.reason == .revoked)
            let again = try CommandClient(
                endpoint: command, timeoutMilliseconds: 1_000, credentials: keys.credentials("alice"))
            #expect(
                throws: ClientError.refused("the broker refused this key: it is not in the broker's authorized keys")
            ) {
                try again.ping()
            }

            // A malformed file changes nothing.
            try (keys.table([("alice", "user alice")]) + "not-a-key operator\n").write(
                toFile: table, atomically: true, encoding: .utf8)
            broker.signal(SIGHUP)
            let refused = try broker.waitForOutput(containing: "NOT reloaded", inStderr: true)
            #expect(refused.contains("line 3"))
            _ = try fresh.ping()
            #expect(throws: refusal) { _ = try alice.query(["alice".id]) }
            #expect(try broker.waitForExit(timeout: 200) == nil)  // still running
        }

        /// The pyzmq CURVE example in docs/ goes online, away and offline with a `user` key, is refused a hello as
        /// someone else, and with a key the broker does not know gets no reply and says the key was refused.
        @Test func pythonCurveExample() async throws {
            let keys = try TestKeys("kim", "stranger")
            let script = ChildProcess.repositoryRoot.appendingPathComponent("docs/examples/curve.py").path
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-py-\(getpid())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            func keyFile(_ name: String) throws -> String {
                let path = directory.appendingPathComponent("\(name).key").path
                let pair = keys.credentials(name)
                try CertificateFile.create(
                    Certificate(publicKey: CurveKey(pair.publicKey)!, secretKey: CurveKey(pair.secretKey)!), at: path)
                return path
            }
            let table = try keys.authorizedKeys([("kim", "user py-kim")])
            try await withBroker({ $0.curve = CurveSettings(secretKey: keys.server.secretKey, authorizedKeys: table) })
            {
                broker in
                let run = try await ChildProcess.run(
                    "/usr/bin/env",
                    [
                        "python3", script, broker.command, broker.update, keys.server.publicKey, try keyFile("kim"),
                        "py-kim",
                    ])
                #expect(run.status == 0, "stderr: \(run.stderr)")
                #expect(run.stdout.contains("hello as not-py-kim: forbidden"))
                let records = try run.stdout.split(separator: "\n").compactMap { line -> PresenceRecord? in
                    line.hasPrefix("{\"user\"") ? try Codec.decodeRecord(Array(line.utf8)) : nil
                }
                #expect(records.map(\.status).suffix(3) == [.online, .away, .offline])

                let stranger = try await ChildProcess.run(
                    "/usr/bin/env",
                    [
                        "python3", script, broker.command, broker.update, keys.server.publicKey,
                        try keyFile("stranger"), "py-kim",
                    ])
                #expect(stranger.status == 2, "stderr: \(stranger.stderr)")
                #expect(stranger.stderr.contains("the broker refused key"))
            }
        }

        /// `serve` refuses, with one line and exit status 64, to bind a non-loopback endpoint without CURVE;
        /// `--insecure` allows it; `--authorized-keys` without a key file is refused too.
        @Test func nonLoopbackBindWithoutCurveIsRefused() async throws {
            let refused = try await ChildProcess.run(
                ChildProcess.rollcall,
                [
                    "serve", "--ephemeral", "--command-endpoint", "tcp://0.0.0.0:*", "--update-endpoint",
                    "tcp://127.0.0.1:*",
                ])
            #expect(refused.status == 64)
            #expect(refused.stderr.contains("--command-endpoint 'tcp://0.0.0.0:*' is not loopback and CURVE is off"))
            #expect(refused.stderr.split(separator: "\n").count == 1)

            let lonely = try await ChildProcess.run(
                ChildProcess.rollcall, ["serve", "--ephemeral", "--authorized-keys", "/nonexistent"])
            #expect(lonely.status == 64)
            #expect(lonely.stderr.contains("--authorized-keys needs --curve-secret-key-file"))

            let insecure = try ChildProcess(
                ChildProcess.rollcall,
                [
                    "serve", "--ephemeral", "--insecure", "--command-endpoint", "tcp://0.0.0.0:*",
                    "--update-endpoint", "tcp://127.0.0.1:*",
                ])
            defer { insecure.terminate() }
            try insecure.waitForOutput(containing: "broker started", inStderr: true, timeout: 10_000)
        }
    }
}
