import Foundation
import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallSecurity
import Testing

extension Integration {
    @Suite("Revocation: a removed key loses its sessions and subscriptions at the reload")
    struct RevocationTests {
        static let refusal = ClientError.refused(
            "the broker refused this key: it is not in the broker's authorized keys")

        /// Runs `body` with an in-process CURVE broker whose authorized-keys file (its path given to `body`) lists
        /// `entries`.
        func withReloadableBroker<T>(
            _ keys: TestKeys, _ entries: [(String, String)], _ body: (InProcessBroker, String) async throws -> T
        ) async throws -> T {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "rollcall-revocation-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let path = directory.appendingPathComponent("authorized_keys").path
            try keys.table(entries).write(toFile: path, atomically: true, encoding: .utf8)
            let table = try keys.authorizedKeys(entries)
            return try await withBroker({
                $0.curve = CurveSettings(
                    secretKey: keys.server.secretKey, authorizedKeys: table, authorizedKeysPath: path)
            }) { try await body($0, path) }
        }

        /// Waits for the last value of each of `users` (online), in whatever order the replays come.
        static func lastValues(of users: Set<String>, on watch: PresenceSubscriber) throws {
            var waiting = users
            _ = try watch.records(through: { record in
                if record.status == .online { waiting.remove(record.user.rawValue) }
                return waiting.isEmpty
            })
        }

        /// `endpoint` connected from another loopback address (libzmq's `source;endpoint` form): the broker tells
        /// the revoked key's connections from the others by their peer address.
        static func from(_ source: String, _ endpoint: String) -> String {
            endpoint.replacingOccurrences(of: "tcp://", with: "tcp://\(source):0;")
        }

        /// Alice's key has a session and a subscriber; Bob's too. Alice's key is removed and the file reloaded:
        /// Bob's subscriber sees Alice offline with reason `revoked`, Alice's subscriber receives nothing more (not
        /// even Bob's next change), her client cannot connect again, and Bob's session and subscription go on.
        @Test func reloadEndsARemovedKeysSessionsAndSubscriptions() async throws {
            let keys = try TestKeys("alice", "bob")
            let entries = [("alice", "user alice"), ("bob", "user bob")]
            try await withReloadableBroker(keys, entries) { broker, path in
                // Alice connects from 127.0.0.2, Bob from 127.0.0.1.
                let alice = try CommandClient(
                    endpoint: Self.from("127.0.0.2", broker.command), timeoutMilliseconds: 2_000,
                    credentials: keys.credentials("alice"))
                let bob = try CommandClient(endpoint: broker.command, credentials: keys.credentials("bob"))
                let aliceSession = try alice.hello(.init(user: "alice".id)).session
                let bobSession = try bob.hello(.init(user: "bob".id)).session

                let bobWatch = try PresenceSubscriber(endpoint: broker.update, credentials: keys.credentials("bob"))
                let aliceWatch = try PresenceSubscriber(
                    endpoint: Self.from("127.0.0.2", broker.update), credentials: keys.credentials("alice"))
                for watch in [bobWatch, aliceWatch] {
                    try watch.subscribe("alice".id)
                    try watch.subscribe("bob".id)
                    try Self.lastValues(of: ["alice", "bob"], on: watch)
                }
                // Everything published to Alice's subscriber before the reload has arrived once Bob's change has.
                try bob.setStatus(bobSession, .away)
                try aliceWatch.expect("bob") { $0.status == .away }
                try bobWatch.expect("bob") { $0.status == .away }

                try keys.table([("bob", "user bob")]).write(toFile: path, atomically: true, encoding: .utf8)
                let reloaded = ContinuousClock.now
                guard case .success = broker.broker.reloadAuthorizedKeys() else {
                    Issue.record("the reload failed")
                    return
                }
                let revoked = try bobWatch.expect("alice") { $0.status == .offline }
                print(
                    "revocation: alice offline (\(revoked.reason?.rawValue ?? "-")) \(milliseconds(since: reloaded)) ms after the reload"
                )
                #expect(revoked.reason == .revoked)
                #expect(try bob.query(["alice".id])["alice".id]?.reason == .revoked)
                try await broker.waitForStatus { $0.sessions == 1 }

                // Bob's session and subscription go on: his next change reaches his subscriber, with nothing of his
                // own before it (a subscriber dropped and reconnected would get Bob's last value again first).
                try bob.heartbeat(bobSession)
                try bob.setStatus(bobSession, .busy)
                let seen = try bobWatch.records(through: { $0.user == "bob".id && $0.status == .busy })
                #expect(seen.map(\.status) == [.busy])
                #expect(try bob.query(["bob".id])["bob".id]?.status == .busy)

                // Alice's subscriber got nothing after the reload: neither her end nor Bob's change, which Bob's
                // subscriber has already seen.
                let after = try aliceWatch.nextMessage(timeout: 500)
                #expect(after == nil, "the revoked subscriber received \(after.map(\.topic) ?? "")")

                // Alice's client lost its connection and cannot make another: ZAP refuses her key.
                #expect(throws: Self.refusal) { try alice.heartbeat(aliceSession) }
                let again = try CommandClient(
                    endpoint: broker.command, timeoutMilliseconds: 1_000, credentials: keys.credentials("alice"))
                #expect(throws: Self.refusal) { try again.ping() }
            }
        }

        /// An authorized subscriber that shares its address with a removed key's loses its update connection at the
        /// reload (the broker cannot tell the two apart on the update endpoint), reconnects by itself, and still
        /// learns the revoked user's end and what follows; its session is untouched.
        @Test func aSubscriberAtTheSameAddressComesBack() async throws {
            let keys = try TestKeys("alice", "bob")
            let entries = [("alice", "user alice"), ("bob", "user bob")]
            try await withReloadableBroker(keys, entries) { broker, path in
                let alice = try CommandClient(endpoint: broker.command, credentials: keys.credentials("alice"))
                let bob = try CommandClient(endpoint: broker.command, credentials: keys.credentials("bob"))
                _ = try alice.hello(.init(user: "alice".id))
                let bobSession = try bob.hello(.init(user: "bob".id)).session
                let bobWatch = try PresenceSubscriber(endpoint: broker.update, credentials: keys.credentials("bob"))
                try bobWatch.subscribe("alice".id)
                try bobWatch.subscribe("bob".id)
                try Self.lastValues(of: ["alice", "bob"], on: bobWatch)

                try keys.table([("bob", "user bob")]).write(toFile: path, atomically: true, encoding: .utf8)
                guard case .success = broker.broker.reloadAuthorizedKeys() else {
                    Issue.record("the reload failed")
                    return
                }
                try bobWatch.expect("alice", timeout: 5_000) { $0.status == .offline && $0.reason == .revoked }
                try bob.setStatus(bobSession, .busy)
                try bobWatch.expect("bob", timeout: 5_000) { $0.status == .busy }
                #expect(try bob.query(["bob".id])["bob".id]?.sessions == 1)
            }
        }

        /// A reader's key made a `user` key by a reload loses its update connection (what libzmq applied for the
        /// reader, `presence/`, cannot be taken back); its SUB reconnects and subscribes again under the new role:
        /// the prefix is no longer applied, its exact topic is. The marker is max's change, published after alice's.
        @Test func aKeyGivenAnotherRoleSubscribesAgainUnderIt() async throws {
            let keys = try TestKeys("watcher", "op")
            let entries = [("watcher", "reader"), ("op", "operator")]
            try await withReloadableBroker(keys, entries) { broker, path in
                let op = try CommandClient(endpoint: broker.command, credentials: keys.credentials("op"))
                let aliceSession = try op.hello(.init(user: "alice".id)).session
                let maxSession = try op.hello(.init(user: "max".id)).session
                let watch = try PresenceSubscriber(
                    endpoint: broker.update, credentials: keys.credentials("watcher"), viewer: "watcher".id)
                try watch.subscribe(prefix: Array("presence/".utf8))
                try watch.subscribe("max".id)
                try watch.expect("max") { _ in true }
                try op.setStatus(aliceSession, .away)
                try watch.expect("alice") { $0.status == .away }  // the reader's prefix

                try keys.table([("watcher", "user watcher"), ("op", "operator")]).write(
                    toFile: path, atomically: true, encoding: .utf8)
                guard case .success = broker.broker.reloadAuthorizedKeys() else {
                    Issue.record("the reload failed")
                    return
                }
                // Back with max's last value on the user's form of his topic, then alice's change and max's.
                try watch.expect("max", timeout: 10_000) { $0.status == .online }
                try op.setStatus(aliceSession, .busy)
                try op.setStatus(maxSession, .busy)
                let seen = try watch.records(through: { $0.user == "max".id && $0.status == .busy }, timeout: 5_000)
                let sawAlice = seen.contains { $0.user.rawValue == "alice" }
                #expect(!sawAlice, "the prefix a reader held stayed applied")
            }
        }
    }
}
