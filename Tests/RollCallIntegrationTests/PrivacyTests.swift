import Foundation
import RollCallBroker
import RollCallWire
import Testing

extension Integration {
    /// Who may see whom, over the WebSocket door with real tokens (docs/privacy.md).
    @Suite("Privacy over WebSocket")
    struct PrivacyTests {
        /// A contacts-only user is seen by a contact and not by a stranger, on a subscription and in `query`; an
        /// operator and a reader see the truth.
        @Test func contactsOnlyUser() async throws {
            try await withGateway { gateway in
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                let alice = try await gateway.client(token: gateway.token("alice"))
                _ = try await alice.call(#"{"op":"hello","id":"h","user":"alice","status":"busy","text":"x"}"#, id: "h")
                #expect(try await Self.ok(Self.contacts(admin, "set", ["bob"])))
                let policy = try await alice.call(
                    #"{"op":"privacy","id":"p","user":"alice","visibility":"contacts"}"#, id: "p")
                #expect(policy[JSONKey("visibility")]?.string == "contacts")
                #expect(policy[JSONKey("last_seen")]?.string == "everyone")

                let bob = try await gateway.client(token: gateway.token("bob"))
                let zoe = try await gateway.client(token: gateway.token("zoe"))
                for client in [bob, zoe] {
                    _ = try await client.call(#"{"op":"subscribe","id":"s","topics":["presence/alice/"]}"#, id: "s")
                }
                let seen = try await bob.expect { $0.contains(#""topic":"presence/alice/""#) }
                #expect(seen.contains(#""status":"busy""#) && seen.contains(#""text":"x""#))
                let hidden = try await zoe.expect { $0.contains(#""topic":"presence/alice/""#) }
                #expect(hidden.contains(#""status":"offline""#) && hidden.contains(#""reason":"bye""#))
                #expect(hidden.contains(#""sessions":0"#) && !hidden.contains("busy") && !hidden.contains(#""x""#))

                #expect(try await Self.record(of: "alice", bob)[JSONKey("status")]?.string == "busy")
                let stranger = try await Self.record(of: "alice", zoe)
                #expect(stranger[JSONKey("status")]?.string == "offline")
                #expect(stranger[JSONKey("reason")]?.string == "bye")
                let reader = try await gateway.client(token: gateway.token("audit", role: "reader"))
                for truth in [admin, reader] {
                    #expect(try await Self.record(of: "alice", truth)[JSONKey("status")]?.string == "busy")
                }
                // The broker heartbeat goes to everyone alike: its counts leave alice out.
                _ = try await zoe.call(#"{"op":"subscribe","id":"b","topics":["broker/"]}"#, id: "b")
                let beat = try await zoe.expect { $0.contains(#""topic":"broker/""#) }
                #expect(beat.contains(#""users_available":0"#) && beat.contains(#""sessions":0"#), "\(beat)")
            }
        }

        /// A contact removed live gets the bye record at once, then nothing while the user keeps changing (a
        /// contact still subscribed sees every change), and the current record at once when added back.
        @Test func contactRemovedLiveThenAddedBack() async throws {
            try await withGateway { gateway in
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                let alice = try await gateway.client(token: gateway.token("alice"))
                let hello = try await alice.call(#"{"op":"hello","id":"h","user":"alice"}"#, id: "h")
                let session = try #require(hello[JSONKey("session")]?.string)
                _ = try await Self.contacts(admin, "set", ["bob", "carol"])
                _ = try await alice.call(#"{"op":"privacy","id":"p","user":"alice","visibility":"contacts"}"#, id: "p")
                let bob = try await gateway.client(token: gateway.token("bob"))
                let carol = try await gateway.client(token: gateway.token("carol"))
                for client in [bob, carol] {
                    _ = try await client.call(#"{"op":"subscribe","id":"s","topics":["presence/alice/"]}"#, id: "s")
                    _ = try await client.expect { $0.contains(#""status":"online""#) }
                }

                #expect(try await Self.ok(Self.contacts(admin, "remove", ["bob"])))
                // An earlier last value (carol's subscription replays the topic to bob too) may come first.
                let bye = try await bob.expect {
                    $0.contains(#""topic":"presence/alice/""#) && $0.contains(#""status":"offline""#)
                }
                #expect(bye.contains(#""reason":"bye""#) && bye.contains(#""sessions":0"#))
                for status in ["busy", "away"] {
                    _ = try await alice.call(
                        #"{"op":"status","id":"t","session":"\#(session)","status":"\#(status)"}"#, id: "t")
                    _ = try await carol.expect { $0.contains(#""status":"\#(status)""#) }
                }
                #expect(try await Self.record(of: "alice", bob)[JSONKey("status")]?.string == "offline")

                #expect(try await Self.ok(Self.contacts(admin, "add", ["bob"])))
                var between: [String] = []
                let back = try await bob.expect { frame in
                    between.append(frame)
                    return frame.contains(#""topic":"presence/alice/""#) && !frame.contains("offline")
                }
                #expect(back.contains(#""status":"away""#))
                print("frames between the bye record and sight given back: \(between.count - 1)")
                #expect(between.dropLast().allSatisfy { !$0.contains(#""topic":"presence/alice/""#) })
                #expect(Self.seq(back) > Self.seq(bye))
            }
        }

        /// A block overrides a contact: the blocked contact gets the bye record; a user may not block for another
        /// user, and the refusal changes nothing.
        @Test func blockOverridesContact() async throws {
            try await withGateway { gateway in
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                let alice = try await gateway.client(token: gateway.token("alice"))
                _ = try await alice.call(#"{"op":"hello","id":"h","user":"alice"}"#, id: "h")
                _ = try await Self.contacts(admin, "set", ["bob"])
                _ = try await alice.call(#"{"op":"privacy","id":"p","user":"alice","visibility":"contacts"}"#, id: "p")
                let bob = try await gateway.client(token: gateway.token("bob"))
                _ = try await bob.call(#"{"op":"subscribe","id":"s","topics":["presence/alice/"]}"#, id: "s")
                _ = try await bob.expect { $0.contains(#""status":"online""#) }

                let refused = try await bob.call(#"{"op":"block","id":"b","user":"alice","add":["carol"]}"#, id: "b")
                #expect(WebSocketTests.code(refused) == "forbidden")
                let blocked = try await alice.call(#"{"op":"block","id":"b","user":"alice","add":["bob"]}"#, id: "b")
                #expect(blocked[JSONKey("blocks")]?.integer == 1)
                let bye = try await bob.expect {
                    $0.contains(#""topic":"presence/alice/""#) && $0.contains(#""status":"offline""#)
                }
                #expect(bye.contains(#""last_seen":null"#) && bye.contains(#""reason":"bye""#))
                #expect(try await Self.record(of: "alice", bob)[JSONKey("status")]?.string == "offline")
            }
        }

        /// `last_seen` hidden while the status shows: an offline user's `last_seen` and `since` are null; and the
        /// reverse: the status hidden, `last_seen` shown (frozen when sight was lost).
        @Test func lastSeenApartFromStatus() async throws {
            try await withGateway { gateway in
                let alice = try await gateway.client(token: gateway.token("alice"))
                let hello = try await alice.call(#"{"op":"hello","id":"h","user":"alice"}"#, id: "h")
                let session = try #require(hello[JSONKey("session")]?.string)
                let bob = try await gateway.client(token: gateway.token("bob"))
                _ = try await alice.call(
                    #"{"op":"privacy","id":"p","user":"alice","visibility":"everyone","last_seen":"nobody"}"#, id: "p")
                let online = try await Self.record(of: "alice", bob)
                #expect(online[JSONKey("status")]?.string == "online" && online[JSONKey("last_seen")]?.integer != nil)
                _ = try await alice.call(#"{"op":"bye","id":"b","session":"\#(session)"}"#, id: "b")
                let offline = try await Self.record(of: "alice", bob)
                #expect(offline[JSONKey("status")]?.string == "offline")
                #expect(offline[JSONKey("last_seen")] == .null && offline[JSONKey("since")] == .null)
                let own = try await Self.record(of: "alice", alice)
                #expect(own[JSONKey("last_seen")]?.integer != nil)

                _ = try await alice.call(#"{"op":"hello","id":"h2","user":"alice","status":"away"}"#, id: "h2")
                _ = try await alice.call(
                    #"{"op":"privacy","id":"p2","user":"alice","visibility":"nobody","last_seen":"everyone"}"#, id: "p2"
                )
                let hidden = try await Self.record(of: "alice", bob)
                #expect(hidden[JSONKey("status")]?.string == "offline" && hidden[JSONKey("reason")]?.string == "bye")
                #expect(hidden[JSONKey("last_seen")]?.integer != nil && hidden[JSONKey("since")]?.integer != nil)
            }
        }

        /// Bad requests are refused with the documented codes, and change nothing.
        @Test func badRequestsChangeNothing() async throws {
            try await withGateway({ $0.presence.maxContacts = 2 }) { gateway in
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                let alice = try await gateway.client(token: gateway.token("alice"))
                let reader = try await gateway.client(token: gateway.token("audit", role: "reader"))
                let cases: [(WebSocketTestClient, String, String)] = [
                    (alice, #"{"op":"contacts","id":"x","user":"alice","set":["bob"]}"#, "forbidden"),
                    (reader, #"{"op":"privacy","id":"x","user":"alice","visibility":"nobody"}"#, "forbidden"),
                    (alice, #"{"op":"privacy","id":"x","user":"bob","visibility":"nobody"}"#, "forbidden"),
                    (admin, #"{"op":"contacts","id":"x","user":"alice","set":["b"],"add":["c"]}"#, "bad_request"),
                    (admin, #"{"op":"contacts","id":"x","user":"alice"}"#, "bad_request"),
                    (admin, #"{"op":"contacts","id":"x","user":"alice","add":"bob"}"#, "bad_request"),
                    (admin, #"{"op":"contacts","id":"x","user":"alice","add":["b","b"]}"#, "bad_request"),
                    (admin, #"{"op":"contacts","id":"x","user":"alice","add":["no way"]}"#, "bad_user"),
                    (admin, #"{"op":"contacts","id":"x","add":["bob"]}"#, "bad_request"),
                    (admin, #"{"op":"contacts","id":"x","user":"alice","set":["a1","a2","a3"]}"#, "limit"),
                    (admin, #"{"op":"privacy","id":"x","user":"alice","visibility":"friends"}"#, "bad_request"),
                    (admin, #"{"op":"privacy","id":"x","user":"alice","last_seen":3}"#, "bad_request"),
                    (alice, #"{"op":"block","id":"x","user":"alice","set":["bob"]}"#, "bad_request"),
                    (alice, #"{"op":"block","id":"x","user":"alice","add":["bob"],"remove":["c"]}"#, "bad_request"),
                ]
                for (client, request, code) in cases {
                    let reply = try await client.call(request, id: "x")
                    #expect(WebSocketTests.code(reply) == code, "\(request)")
                }
                let policy = try await admin.call(#"{"op":"privacy","id":"r","user":"alice"}"#, id: "r")
                #expect(policy[JSONKey("visibility")]?.string == "everyone")
                #expect(policy[JSONKey("last_seen")]?.string == "everyone")
                let contacts = try await Self.contacts(admin, "add", [])
                #expect(contacts[JSONKey("contacts")]?.integer == 0)
                let blocks = try await alice.call(#"{"op":"block","id":"n","user":"alice","remove":[]}"#, id: "n")
                #expect(blocks[JSONKey("blocks")]?.integer == 0)
            }
        }

        /// Policies, contacts and blocks survive a restart with a data directory.
        @Test func settingsSurviveARestart() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let configure = { (configuration: inout BrokerConfiguration) in
                configuration.storage = .directory(directory)
                // The restored placeholder keeps alice available long enough for the second half.
                configuration.presence.defaultTTLMilliseconds = 120_000
            }
            try await withGateway(configure) { gateway in
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                let alice = try await gateway.client(token: gateway.token("alice"))
                _ = try await alice.call(#"{"op":"hello","id":"h","user":"alice","status":"busy"}"#, id: "h")
                _ = try await Self.contacts(admin, "set", ["bob"])
                _ = try await alice.call(
                    #"{"op":"privacy","id":"p","user":"alice","visibility":"contacts","last_seen":"nobody"}"#, id: "p")
                _ = try await alice.call(#"{"op":"block","id":"b","user":"alice","add":["mallory"]}"#, id: "b")
            }
            try await withGateway(configure) { gateway in
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                let policy = try await admin.call(#"{"op":"privacy","id":"r","user":"alice"}"#, id: "r")
                #expect(policy[JSONKey("visibility")]?.string == "contacts")
                #expect(policy[JSONKey("last_seen")]?.string == "nobody")
                #expect(try await Self.contacts(admin, "add", [])[JSONKey("contacts")]?.integer == 1)
                let blocks = try await admin.call(#"{"op":"block","id":"n","user":"alice","add":[]}"#, id: "n")
                #expect(blocks[JSONKey("blocks")]?.integer == 1)
                // Alice is kept available for a TTL after the restart: her contact sees it, a stranger does not.
                let bob = try await gateway.client(token: gateway.token("bob"))
                let zoe = try await gateway.client(token: gateway.token("zoe"))
                #expect(try await Self.record(of: "alice", bob)[JSONKey("status")]?.string == "busy")
                let stranger = try await Self.record(of: "alice", zoe)
                #expect(stranger[JSONKey("status")]?.string == "offline")
                #expect(stranger[JSONKey("last_seen")] == .null && stranger[JSONKey("reason")]?.string == "bye")
            }
        }

        /// A watcher that resumes (`after`) gets no missed transition of a user now hidden from it, only its view:
        /// the record of a bye at the moment sight was lost.
        @Test func resumeLeavesOutAHiddenUser() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try await withGateway({ $0.storage = .directory(directory) }) { gateway in
                let alice = try await gateway.client(token: gateway.token("alice"))
                let bob = try await gateway.client(token: gateway.token("bob"))
                _ = try await bob.call(#"{"op":"subscribe","id":"s","topics":["presence/alice/"]}"#, id: "s")
                let hello = try await alice.call(#"{"op":"hello","id":"h","user":"alice","ttl_ms":600000}"#, id: "h")
                let session = try #require(hello[JSONKey("session")]?.string)
                let online = try HistoryResumeTests.message(try await bob.expect { $0.contains(#""status":"online""#) })
                let seen = try #require(online[JSONKey("offset")]?.integer)
                bob.close()

                _ = try await alice.call(#"{"op":"privacy","id":"p","user":"alice","visibility":"nobody"}"#, id: "p")
                _ = try await alice.call(
                    #"{"op":"status","id":"t","session":"\#(session)","status":"away","text":"secret"}"#, id: "t")
                let ping = try await alice.call(#"{"op":"ping","id":"g"}"#, id: "g")
                let epoch = try #require(ping[JSONKey("log_epoch")]?.string)
                let again = try await gateway.client(token: gateway.token("bob"))
                let resumed = try await again.call(
                    #"{"op":"subscribe","id":"r","topics":["presence/alice/"],"after":\#(seen),"log_epoch":"\#(epoch)"}"#,
                    id: "r")
                #expect(resumed[JSONKey("ok")] == .bool(true))
                let first = try await again.expect { $0.contains(#""topic":"presence/alice/""#) }
                #expect(first.contains(#""status":"offline""#) && first.contains(#""reason":"bye""#))
                #expect(!first.contains("away") && !first.contains("secret"))
            }
        }

        /// `history` and `query` with `at` read the log as the viewer may see the user: a user hidden from bob
        /// reads, for bob, as having said bye when bob lost sight (nothing after: not the status, not the text); an
        /// operator reads every transition.
        @Test func historyOfAHiddenUser() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try await withGateway({ $0.storage = .directory(directory) }) { gateway in
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                let alice = try await gateway.client(token: gateway.token("alice"))
                let bob = try await gateway.client(token: gateway.token("bob"))
                let hello = try await alice.call(#"{"op":"hello","id":"h","user":"alice","ttl_ms":600000}"#, id: "h")
                let session = try #require(hello[JSONKey("session")]?.string)
                _ = try await alice.call(#"{"op":"privacy","id":"p","user":"alice","visibility":"nobody"}"#, id: "p")
                _ = try await alice.call(
                    #"{"op":"status","id":"t","session":"\#(session)","status":"away","text":"secret"}"#, id: "t")

                func statuses(_ reply: [JSONKey: JSON]) -> [String] {
                    guard case .array(let entries)? = reply[JSONKey("history")] else { return [] }
                    return entries.compactMap {
                        guard case .object(let entry) = $0, case .object(let record)? = entry[JSONKey("record")]
                        else { return nil }
                        return record[JSONKey("status")]?.string
                    }
                }
                let request = #"{"op":"history","id":"y","user":"alice"}"#
                #expect(statuses(try await admin.call(request, id: "y")) == ["online", "away"])
                let hidden = try await bob.call(request, id: "y")
                #expect(statuses(hidden) == ["online", "offline"])
                let text = "\(hidden)"
                #expect(!text.contains("secret") && !text.contains("away"))

                let ping = try await admin.call(#"{"op":"ping","id":"g"}"#, id: "g")
                let now = try #require(ping[JSONKey("time")]?.integer)
                let at = try await bob.call(#"{"op":"query","id":"a","users":["alice"],"at":\#(now)}"#, id: "a")
                guard case .object(let presence)? = at[JSONKey("presence")],
                    case .object(let record)? = presence[JSONKey("alice")]
                else { throw TestFailure("no record of alice in \(at)") }
                #expect(record[JSONKey("status")]?.string == "offline" && record[JSONKey("reason")]?.string == "bye")
            }
        }

        /// Edits alice's contacts with `client`'s token.
        static func contacts(
            _ client: WebSocketTestClient, _ verb: String, _ users: [String]
        ) async throws -> [JSONKey: JSON] {
            let list = users.map { "\"\($0)\"" }.joined(separator: ",")
            return try await client.call(
                #"{"op":"contacts","id":"c","user":"alice","\#(verb)":[\#(list)]}"#, id: "c")
        }

        static func ok(_ reply: [JSONKey: JSON]) -> Bool { reply[JSONKey("ok")] == .bool(true) }

        /// `user`'s record in a `query` by `client`.
        static func record(of user: String, _ client: WebSocketTestClient) async throws -> [JSONKey: JSON] {
            let reply = try await client.call(#"{"op":"query","id":"q","users":["\#(user)"]}"#, id: "q")
            guard case .object(let presence)? = reply[JSONKey("presence")],
                case .object(let record)? = presence[JSONKey(user)]
            else { throw TestFailure("no record of \(user) in \(reply)") }
            return record
        }

        /// The `seq` in an update frame.
        static func seq(_ frame: String) -> UInt64 {
            guard let range = frame.range(of: #""seq":"#) else { return 0 }
            return UInt64(frame[range.upperBound...].prefix { $0.isNumber }) ?? 0
        }
    }
}
