import Foundation
import RollCallClient
import RollCallCore
import RollCallWire
import Testing

extension Integration {
    /// A group is read by its members (and readers and operators): a `user` key or token that is not a member gets
    /// `forbidden` (docs/privacy.md).
    @Suite("Groups: members only")
    struct GroupMembershipTests {
        /// Over the WebSocket door with real tokens: a member reads the group and subscribes to its topic (the
        /// aggregate comes at once); a non-member gets `forbidden` for both, also for a group that does not exist;
        /// a reader reads it; a member taken out is refused from its next read.
        @Test func webSocketTokens() async throws {
            try await withGateway { gateway in
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                let defined = try await admin.call(
                    #"{"op":"group","id":"g","group":"team","members":["alice","bob"]}"#, id: "g")
                #expect(defined[JSONKey("total")]?.integer == 2)
                let alice = try await gateway.client(token: gateway.token("alice"))
                let zoe = try await gateway.client(token: gateway.token("zoe"))
                let reader = try await gateway.client(token: gateway.token("audit", role: "reader"))

                let read = try await alice.call(#"{"op":"group","id":"r","group":"team"}"#, id: "r")
                #expect(read[JSONKey("total")]?.integer == 2)
                let subscribed = try await alice.call(
                    #"{"op":"subscribe","id":"s","topics":["group/team/"]}"#, id: "s")
                #expect(subscribed[JSONKey("ok")] == .bool(true))
                let aggregate = try await alice.expect { $0.contains(#""topic":"group/team/""#) }
                #expect(aggregate.contains(#""total":2"#))

                for group in ["team", "nosuchgroup"] {
                    let refused = try await zoe.call(#"{"op":"group","id":"r","group":"\#(group)"}"#, id: "r")
                    #expect(WebSocketTests.code(refused) == "forbidden", "\(refused)")
                }
                let refusedTopic = try await zoe.call(
                    #"{"op":"subscribe","id":"s","topics":["presence/alice/","group/team/"]}"#, id: "s")
                #expect(WebSocketTests.code(refusedTopic) == "forbidden")
                let audited = try await reader.call(#"{"op":"group","id":"r","group":"team"}"#, id: "r")
                #expect(audited[JSONKey("total")]?.integer == 2)

                _ = try await admin.call(#"{"op":"group","id":"g","group":"team","remove":["alice"]}"#, id: "g")
                let out = try await alice.call(#"{"op":"group","id":"r","group":"team"}"#, id: "r")
                #expect(WebSocketTests.code(out) == "forbidden")
            }
        }

        /// With CURVE keys: a non-member's `group` read is `forbidden` and its subscription to the group's topic is
        /// not applied (its connection gets no group message, though a later exact topic's record comes); a
        /// member's key reads the group and receives its messages.
        @Test func curveKeys() async throws {
            let keys = try TestKeys("alice", "bob", "op", "reader", "stranger")
            try await SecurityTests().withCurveBroker(keys) { broker in
                let op = try CommandClient(endpoint: broker.command, credentials: keys.credentials("op"))
                let alice = try CommandClient(endpoint: broker.command, credentials: keys.credentials("alice"))
                let bob = try CommandClient(endpoint: broker.command, credentials: keys.credentials("bob"))
                _ = try op.group("team".group, GroupEdit(members: ["alice".id, "carol".id]))
                #expect(try alice.group("team".group).counts.total == 2)
                #expect(rejection(of: { _ = try bob.group("team".group) }) == .forbidden)

                let member = try PresenceSubscriber(endpoint: broker.update, credentials: keys.credentials("alice"))
                let stranger = try PresenceSubscriber(endpoint: broker.update, credentials: keys.credentials("bob"))
                for subscriber in [member, stranger] {
                    try subscriber.subscribe(prefix: Topic.group("team".group).bytes)
                    try subscriber.subscribe("dave".id)
                }
                // Subscriptions are read in order: once dave's last value is here, the group topic was dealt with.
                try member.expect("dave") { _ in true }
                var strangerTopics: [String] = []
                while let message = try stranger.nextMessage(timeout: 3_000) {
                    strangerTopics.append(baseTopic(message.topic))
                    if baseTopic(message.topic) == "presence/dave/" { break }
                }
                #expect(strangerTopics.last == "presence/dave/")

                _ = try op.hello(.init(user: "carol".id))
                var memberTopics: [String] = []
                let deadline = ContinuousClock.now + .seconds(5)
                while !memberTopics.contains("group/team/"), ContinuousClock.now < deadline {
                    if let message = try member.nextMessage(timeout: 100) {
                        memberTopics.append(baseTopic(message.topic))
                    }
                }
                #expect(memberTopics.contains("group/team/"), "the member got no group message")
                // A marker after the group message: the stranger gets dave's record and nothing of the group.
                _ = try op.hello(.init(user: "dave".id))
                strangerTopics = []
                while let message = try stranger.nextMessage(timeout: 3_000) {
                    strangerTopics.append(baseTopic(message.topic))
                    if baseTopic(message.topic) == "presence/dave/" { break }
                }
                #expect(strangerTopics == ["presence/dave/"], "\(strangerTopics)")
            }
        }

        /// Blocks between members, over the WebSocket with real tokens: once alice blocks bob, bob's group messages
        /// and `group` reply count alice offline with the record of a bye, while carol's show alice busy.
        @Test func blockedMemberSeesBlockerOffline() async throws {
            try await withGateway { gateway in
                let admin = try await gateway.client(token: gateway.token("admin", role: "operator"))
                _ = try await admin.call(
                    #"{"op":"group","id":"g","group":"team","members":["alice","bob","carol"]}"#, id: "g")
                let alice = try await gateway.client(token: gateway.token("alice"))
                _ = try await alice.call(#"{"op":"hello","id":"h","user":"alice","status":"busy"}"#, id: "h")
                let bob = try await gateway.client(token: gateway.token("bob"))
                let carol = try await gateway.client(token: gateway.token("carol"))
                _ = try await carol.call(#"{"op":"hello","id":"h","user":"carol"}"#, id: "h")
                for member in [bob, carol] {
                    _ = try await member.call(#"{"op":"subscribe","id":"s","topics":["group/team/"]}"#, id: "s")
                    _ = try await member.expect {
                        $0.contains(#""topic":"group/team/""#) && $0.contains(#""online":2"#)
                    }
                }

                _ = try await alice.call(#"{"op":"block","id":"b","user":"alice","add":["bob"]}"#, id: "b")
                // Bob's view: the first message that shows alice offline (an earlier one may still show her busy).
                let hidden = try await bob.expect {
                    $0.contains(#""topic":"group/team/""#) && $0.contains(#"{"user":"alice","status":"offline""#)
                }
                #expect(hidden.contains(#""group":"team","online":1,"#), "\(hidden)")
                #expect(hidden.contains(#""reason":"bye""#) && !hidden.contains(#""status":"busy""#))
                // Carol's copy of the same message (the same group seq) shows the truth.
                let seq = Self.groupSeq(hidden)
                let truth = try await carol.expect {
                    $0.contains(#""topic":"group/team/""#) && Self.groupSeq($0) == seq
                }
                #expect(truth.contains(#""group":"team","online":2,"#), "\(truth)")
                #expect(truth.contains(#"{"user":"alice","status":"busy""#))

                let read = try await bob.call(#"{"op":"group","id":"r","group":"team"}"#, id: "r")
                #expect(read[JSONKey("online")]?.integer == 1)
                guard case .object(let members)? = read[JSONKey("members")],
                    case .object(let record)? = members[JSONKey("alice")]
                else { throw TestFailure("no alice in \(read)") }
                #expect(record[JSONKey("status")]?.string == "offline")
                let carols = try await carol.call(#"{"op":"group","id":"r","group":"team"}"#, id: "r")
                #expect(carols[JSONKey("online")]?.integer == 2)
            }
        }

        /// The group seq of a group message frame (its last `seq`, after the changed records' own).
        static func groupSeq(_ frame: String) -> UInt64 {
            guard let range = frame.range(of: #""seq":"#, options: .backwards) else { return 0 }
            return UInt64(frame[range.upperBound...].prefix { $0.isNumber }) ?? 0
        }
    }
}
