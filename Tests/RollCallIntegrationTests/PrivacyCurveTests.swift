import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

extension Integration {
    /// Who may see whom over the command endpoint with real CURVE keys (docs/privacy.md).
    @Suite("Privacy over CURVE")
    struct PrivacyCurveTests {
        /// Runs `body` with a CURVE broker where each of `users` has a key bound to that user, `op` an operator's
        /// key and `reader` a reader's.
        func withUserKeys<T>(
            _ users: [String], _ body: (InProcessBroker, TestKeys) async throws -> T
        ) async throws -> T {
            let keys = try TestKeys(names: users + ["op", "reader"])
            let table = try keys.authorizedKeys(
                users.map { ($0, "user \($0)") } + [("op", "operator"), ("reader", "reader")])
            return try await withBroker({
                $0.curve = CurveSettings(secretKey: keys.server.secretKey, authorizedKeys: table)
            }) { try await body($0, keys) }
        }

        /// A contacts-only user: a contact's key reads the truth, a stranger's key the record of a bye; operator and
        /// reader keys the truth; a user key may not edit contacts nor another user's policy, and nothing changes.
        @Test func contactsOnlyUserInQuery() async throws {
            try await withUserKeys(["alice", "bob", "zoe"]) { broker, keys in
                var clients: [String: CommandClient] = [:]
                for name in ["alice", "bob", "zoe", "op", "reader"] {
                    clients[name] = try CommandClient(endpoint: broker.command, credentials: keys.credentials(name))
                }
                let alice = "alice".id
                _ = try clients["alice"]!.hello(.init(user: alice, status: .busy, text: "x"))
                #expect(
                    rejection(of: { _ = try clients["alice"]!.call(.contacts(user: alice, .set(["zoe".id]))) })
                        == .forbidden)
                _ = try clients["op"]!.call(.contacts(user: alice, .set(["bob".id])))
                _ = try clients["alice"]!.call(.privacy(user: alice, visibility: .contacts, lastSeen: nil))
                #expect(
                    rejection(of: {
                        _ = try clients["zoe"]!.call(.privacy(user: alice, visibility: .everyone, lastSeen: nil))
                    }) == .forbidden)

                #expect(try clients["bob"]!.query([alice])[alice]?.status == .busy)
                let hidden = try #require(try clients["zoe"]!.query([alice])[alice])
                #expect(hidden.status == .offline && hidden.reason == .bye)
                #expect(hidden.sessions == 0 && hidden.text == nil)
                for truth in ["op", "reader", "alice"] {
                    #expect(try clients[truth]!.query([alice])[alice]?.status == .busy, "\(truth)")
                }
            }
        }

        /// The update socket with real CURVE keys (docs/privacy.md, "ZeroMQ subscriptions"): a contacts-only user's
        /// records reach her contact's key on its own topic and not a stranger's, which gets the record of a bye and
        /// then nothing while she keeps changing; a contact removed live gets its bye, then nothing; a block on a
        /// user without other settings hides him from the blocked key alone; a reader's prefix subscription receives
        /// the truth, and every copy, which a subscriber not addressed drops. Each "nothing" is proved by a marker: a
        /// change of a public user published after it, which comes on the same connection, in order.
        @Test func contactsOnlyUserOnTheUpdateSocket() async throws {
            try await withUserKeys(["alice", "bob", "zoe", "pat", "max"]) { broker, keys in
                let op = try CommandClient(endpoint: broker.command, credentials: keys.credentials("op"))
                let (alice, pat, max) = ("alice".id, "pat".id, "max".id)
                var sessions: [UserID: SessionID] = [:]
                for user in [alice, pat, max] {
                    sessions[user] = try op.hello(.init(user: user, status: .busy, text: "t")).session
                }
                _ = try op.call(.contacts(user: alice, .set(["bob".id])))
                _ = try op.call(.privacy(user: alice, visibility: .contacts, lastSeen: nil))

                var bob = try Feed(broker, keys, "bob", following: [alice, pat, max])
                var zoe = try Feed(broker, keys, "zoe", following: [alice, pat, max])
                var reader = try Feed(broker, keys, "reader", following: nil)
                // Each key's last values come on its own topics; the reader's prefix is applied once its heartbeat
                // comes (subscriptions are applied in order).
                try bob.read { feed in [alice, pat, max].allSatisfy { feed.last(of: $0) != nil } }
                try zoe.read { feed in [alice, pat, max].allSatisfy { feed.last(of: $0) != nil } }
                try reader.read { $0.heartbeats > 0 }
                // Before zoe's key followed alice, bob's was the only one, and saw all of her: once for everyone.
                #expect(bob.last(of: alice)?.status == .busy)
                #expect(Set(bob.topics(of: alice)).isSubset(of: ["presence/alice/bob/", "presence/alice/*/"]))
                let bye = try #require(zoe.last(of: alice))
                #expect(bye.status == .offline && bye.reason == .bye && bye.text == nil)
                #expect(Set(zoe.topics(of: alice)) == ["presence/alice/zoe/"])
                #expect(Set(zoe.topics(of: pat)) == ["presence/pat/*/"])

                // Alice changes, then max (the marker): bob gets both, zoe only max.
                func change(_ user: UserID, _ status: Status) throws { try op.setStatus(sessions[user]!, status) }
                try change(alice, .away)
                try change(max, .away)
                try bob.read { $0.last(of: max)?.status == .away }
                try zoe.read { $0.last(of: max)?.status == .away }
                #expect(bob.last(of: alice)?.status == .away && bob.topics(of: alice).last == "presence/alice/bob/")
                #expect(zoe.records(of: alice).allSatisfy { $0 == bye }, "nothing after the bye")
                try reader.read { $0.last(of: max)?.status == .away }
                #expect(
                    reader.topics(of: alice).contains("presence/alice/")
                        && reader.topics(of: alice).contains("presence/alice/bob/"))
                // A reader takes the truth only (a last value may have come before: a replay of the subscriptions).
                let truth = reader.messages.filter { ["presence/alice/", "presence/alice/*/"].contains($0.topic) }
                    .map(\.record)
                #expect(reader.taken(by: nil, of: alice) == truth && truth.last?.status == .away)

                // Bob removed from alice's contacts: his bye at once, then nothing.
                _ = try op.call(.contacts(user: alice, .remove(["bob".id])))
                try bob.read { $0.last(of: alice)?.status == .offline }
                let bobsBye = try #require(bob.last(of: alice))
                #expect(bobsBye.reason == .bye && bobsBye.seq > bob.records(of: alice).dropLast().last!.seq)
                try change(alice, .online)
                try change(max, .online)
                try bob.read { $0.last(of: max)?.status == .online }
                #expect(bob.last(of: alice) == bobsBye)

                // Pat, with no settings, blocks zoe: she gets his bye on her own topic; bob goes on seeing him.
                _ = try op.call(.block(user: pat, .add(["zoe".id])))
                try zoe.read { $0.last(of: pat)?.status == .offline }
                #expect(zoe.topics(of: pat).last == "presence/pat/zoe/")
                try change(pat, .away)
                try change(max, .busy)
                try zoe.read { $0.last(of: max)?.status == .busy }
                try bob.read { $0.last(of: max)?.status == .busy }
                #expect(zoe.last(of: pat)?.status == .offline)
                #expect(bob.last(of: pat)?.status == .away && bob.topics(of: pat).last == "presence/pat/bob/")
            }
        }

        /// Blocks and membership inside a group on the update socket, with real CURVE keys: alice blocks bob, so
        /// every group message bob's key receives counts her offline and shows her record of a bye, while carol's
        /// shows her as she is; zoe, taken out of the group, receives nothing of it after the message that takes her
        /// out (the marker: a change of max, who is in no group, published after carol got the next group message).
        @Test func groupWithABlockedMemberOnTheUpdateSocket() async throws {
            try await withUserKeys(["bob", "carol", "zoe"]) { broker, keys in
                let op = try CommandClient(endpoint: broker.command, credentials: keys.credentials("op"))
                let (alice, max, team) = ("alice".id, "max".id, "team".group)
                var sessions: [UserID: SessionID] = [:]
                for user in [alice, max] {
                    sessions[user] = try op.hello(.init(user: user, status: .busy, text: "t")).session
                }
                _ = try op.group(team, GroupEdit(members: [alice, "bob".id, "carol".id, "zoe".id]))
                _ = try op.call(.block(user: alice, .add(["bob".id])))

                var feeds: [String: Feed] = [:]
                for name in ["bob", "carol", "zoe"] {
                    var feed = try Feed(broker, keys, name, following: [max], groups: [team])
                    try feed.read { !$0.groupUpdates.isEmpty && $0.last(of: max) != nil }
                    feeds[name] = feed
                }
                try op.setStatus(sessions[alice]!, .away)
                try feeds["carol"]!.read { $0.groupUpdates.contains { $0.update.changed.first?.status == .away } }
                try feeds["bob"]!.read { $0.groupUpdates.count >= 2 }
                let bobs = feeds["bob"]!.groupUpdates
                #expect(bobs.allSatisfy { $0.update.counts.busy == 0 && $0.update.counts.away == 0 })
                #expect(bobs.flatMap(\.update.changed).allSatisfy { $0.status == .offline && $0.reason == .bye })
                #expect(bobs.last?.topic == "group/team/bob/")

                _ = try op.group(team, GroupEdit(members: [alice, "bob".id, "carol".id]))
                try feeds["zoe"]!.read { $0.groupUpdates.contains { $0.update.removed == ["zoe".id] } }
                try op.setStatus(sessions[alice]!, .online)
                try feeds["carol"]!.read { $0.groupUpdates.contains { $0.update.changed.first?.status == .online } }
                try op.setStatus(sessions[max]!, .away)
                try feeds["zoe"]!.read { $0.last(of: max)?.status == .away }
                let zoes = feeds["zoe"]!.groupUpdates
                #expect(zoes.last?.update.removed == ["zoe".id], "nothing of the group after zoe was taken out")
            }
        }

        /// One subscriber's messages on the update socket, as they came: the topic and the record.
        struct Feed {
            let subscriber: PresenceSubscriber
            let viewer: UserID?
            var messages: [(topic: String, record: PresenceRecord)] = []
            var groupUpdates: [(topic: String, update: GroupUpdate)] = []
            var heartbeats = 0

            /// A key's subscriber following `users` (nil: every user, by prefix), with the key's user as its viewer.
            init(
                _ broker: InProcessBroker, _ keys: TestKeys, _ name: String, following users: [UserID]?,
                groups: [GroupID] = []
            ) throws {
                viewer = name == "reader" ? nil : name.id
                subscriber = try PresenceSubscriber(
                    endpoint: broker.update, credentials: keys.credentials(name), viewer: viewer)
                if let users {
                    for user in users { try subscriber.subscribe(user) }
                } else {
                    try subscriber.subscribeAll()
                    try subscriber.subscribe(prefix: Topic.broker.bytes)
                }
                for group in groups { try subscriber.subscribe(prefix: Topic.group(group).bytes) }
            }

            /// Reads until `done` holds, for at most 10 s.
            mutating func read(until done: (Feed) -> Bool) throws {
                let deadline = ContinuousClock.now + .seconds(10)
                while !done(self) {
                    guard ContinuousClock.now < deadline else { throw FeedTimeout() }
                    guard let (topic, body) = try subscriber.nextMessage(timeout: 200) else { continue }
                    if topic == Topic.broker.text {
                        heartbeats += 1
                    } else if topic.hasPrefix(Topic.groupPrefix), let update = try? Codec.decodeGroupUpdate(body) {
                        groupUpdates.append((topic, update))
                    } else if let record = try? Codec.decodeRecord(body) {
                        messages.append((topic, record))
                    }
                }
            }

            /// What came of `user`, whatever its topic.
            func records(of user: UserID) -> [PresenceRecord] {
                messages.filter { $0.record.user == user }.map(\.record)
            }
            func last(of user: UserID) -> PresenceRecord? { records(of: user).last }
            func topics(of user: UserID) -> [String] { messages.filter { $0.record.user == user }.map(\.topic) }
            /// What a subscriber bound to `viewer` takes of `user` (protocol §8.2).
            func taken(by viewer: UserID?, of user: UserID) -> [PresenceRecord] {
                messages.filter {
                    $0.record.user == user && ReceivedTopic(Array($0.topic.utf8))?.isFor(viewer) == true
                }.map(\.record)
            }
        }

        struct FeedTimeout: Error {}
    }
}
