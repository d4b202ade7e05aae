import Foundation
import JWTKit
import RollCallWire
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension Integration {
    /// `rollcall serve --contacts-file`: the app backend's contacts read at start and on SIGHUP (docs/privacy.md),
    /// over the WebSocket door with real tokens.
    @Suite("Contacts file")
    struct ContactsFileTests {
        /// A token for `user` signed with ``testSecret``.
        static func token(_ user: String, role: String? = nil) async throws -> String {
            let keys = JWTKeyCollection()
            await keys.add(hmac: HMACKey(from: testSecret), digestAlgorithm: .sha256)
            return try await keys.sign(
                TestClaims(sub: .init(value: user), exp: .init(value: Date(timeIntervalSinceNow: 600)), role: role))
        }

        /// Contacts from the file at start: a contacts-only user is seen by a contact and not by a stranger. SIGHUP
        /// with a bad file changes nothing (logged with file and line); with a file that drops the contact, the
        /// contact's live subscription gets the bye record at once and a new contact sees the user.
        @Test func startThenSighup() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-contacts-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let secret = directory.appendingPathComponent("jwt").path
            let contacts = directory.appendingPathComponent("contacts").path
            try testSecret.write(toFile: secret, atomically: true, encoding: .utf8)
            try "# the backend's graph\nalice: bob\n".write(toFile: contacts, atomically: true, encoding: .utf8)
            let serve = try ChildProcess(
                ChildProcess.rollcall,
                [
                    "serve", "--test-mode", "--ws-endpoint", "127.0.0.1:0", "--jwt-key-file", secret,
                    "--contacts-file", contacts, "--print-endpoints",
                ])
            defer { serve.terminate() }
            let line = try serve.waitForOutput(containing: #""ws":"#, timeout: 10_000)
            guard case .object(let endpoints) = try JSONParser.parse(line),
                let url = endpoints[JSONKey("ws")]?.string
            else { throw TestFailure("no ws endpoint in \(line)") }
            func client(_ user: String, role: String? = nil) async throws -> WebSocketTestClient {
                try await WebSocketTestClient.connect(url + "?token=" + (try await Self.token(user, role: role)))
            }

            let alice = try await client("alice")
            _ = try await alice.call(#"{"op":"hello","id":"h","user":"alice","status":"busy"}"#, id: "h")
            _ = try await alice.call(#"{"op":"privacy","id":"p","user":"alice","visibility":"contacts"}"#, id: "p")
            let bob = try await client("bob")
            let zoe = try await client("zoe")
            for viewer in [bob, zoe] {
                _ = try await viewer.call(#"{"op":"subscribe","id":"s","topics":["presence/alice/"]}"#, id: "s")
            }
            #expect(try await bob.expect { $0.contains(#""topic":"presence/alice/""#) }.contains(#""status":"busy""#))
            let hidden = try await zoe.expect { $0.contains(#""topic":"presence/alice/""#) }
            #expect(hidden.contains(#""status":"offline""#) && hidden.contains(#""reason":"bye""#))
            #expect(try await PrivacyTests.record(of: "alice", zoe)[JSONKey("status")]?.string == "offline")
            #expect(try await PrivacyTests.record(of: "alice", bob)[JSONKey("status")]?.string == "busy")

            // A bad line 3: nothing changes, not even line 1's user.
            try "alice: carol\n\nbob carol\n".write(toFile: contacts, atomically: true, encoding: .utf8)
            serve.signal(SIGHUP)
            let refused = try serve.waitForOutput(
                containing: "contacts file NOT reloaded", inStderr: true, timeout: 10_000)
            #expect(refused.contains("\(contacts):3:"))
            let admin = try await client("admin", role: "operator")
            let count = try await PrivacyTests.contacts(admin, "add", [])
            #expect(count[JSONKey("contacts")]?.integer == 1)
            #expect(try await PrivacyTests.record(of: "alice", bob)[JSONKey("status")]?.string == "busy")

            // Bob dropped, carol added: bob's open subscription gets the bye record at once.
            try "alice: carol\n".write(toFile: contacts, atomically: true, encoding: .utf8)
            serve.signal(SIGHUP)
            let bye = try await bob.expect(timeout: 10_000) {
                $0.contains(#""topic":"presence/alice/""#) && $0.contains(#""status":"offline""#)
            }
            #expect(bye.contains(#""reason":"bye""#) && bye.contains(#""sessions":0"#))
            try serve.waitForStderr(containing: "SIGHUP: contacts file reloaded", count: 1, timeout: 10_000)
            #expect(try await PrivacyTests.record(of: "alice", bob)[JSONKey("status")]?.string == "offline")
            let carol = try await client("carol")
            #expect(try await PrivacyTests.record(of: "alice", carol)[JSONKey("status")]?.string == "busy")
            serve.signal(SIGTERM)
            #expect(try serve.waitForExit(timeout: 15_000) == 0)
        }

        /// A file that cannot be used stops the start with exit status 64 and a message naming file and line; so
        /// does a file that is missing.
        @Test func badFileRefusesToStart() async throws {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-contacts-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: file) }
            try "alice: bob\n# fine so far\nbob: alice, bob\n".write(toFile: file, atomically: true, encoding: .utf8)
            let bad = try await ChildProcess.run(
                ChildProcess.rollcall, ["serve", "--test-mode", "--contacts-file", file])
            #expect(bad.status == 64)
            #expect(
                bad.stderr.contains("--contacts-file \(file):3: bob cannot be in their own contacts"), "\(bad.stderr)")
            let missing = try await ChildProcess.run(
                ChildProcess.rollcall, ["serve", "--test-mode", "--contacts-file", file + ".missing"])
            #expect(missing.status == 64)
            #expect(missing.stderr.contains("\(file).missing: cannot be read"), "\(missing.stderr)")
        }
    }
}
