import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallWire
import Testing
import ZeroMQ

extension Integration {
    @Suite("Publish and subscribe over TCP", .serialized)
    struct PublishSubscribeTests {
        /// A scripted publisher goes online and a subscriber of that user sees it, then sees bye.
        @Test func subscriberSeesOnlineAndBye() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("alice")
                let client = try broker.client()
                let granted = try client.hello(.init(user: "alice".id, text: "hi"))
                let online = try subscriber.expect("alice") { $0.status == .online }
                #expect(online.text == "hi")
                #expect(online.sessions == 1)
                try client.bye(granted.session)
                let offline = try subscriber.expect("alice") { $0.status == .offline }
                #expect(offline.reason == .bye)
                #expect(offline.seq > online.seq)
            }
        }

        /// A subscriber who arrives late gets the current record at once, without waiting for a change.
        @Test func lateSubscriberGetsLastValue() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                _ = try client.hello(.init(user: "alice".id, status: .busy, text: "in a call"))
                let subscriber = try PresenceSubscriber(endpoint: broker.update)
                try subscriber.subscribe("alice".id)
                let record = try subscriber.expect("alice") { _ in true }
                #expect(record.status == .busy)
                #expect(record.text == "in a call")
                // A user never seen is answered as offline, never seen.
                try subscriber.subscribe("nobody".id)
                let nobody = try subscriber.expect("nobody") { _ in true }
                #expect(nobody == .unknown("nobody".id))
            }
        }

        /// `presence/bob/` never delivers `bobby`; `presence/` delivers both but sends no flood on subscribe.
        @Test func topicsNameExactlyOneUser() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                _ = try client.hello(.init(user: "bobby".id))
                let bob = try broker.subscriber("bob")
                let everyone = try PresenceSubscriber(endpoint: broker.update)
                try everyone.subscribeAll()
                // Subscriptions are read in order: nothing comes before a later exact topic's last value.
                try everyone.subscribe("probe".id)
                #expect(try everyone.records(before: "probe").isEmpty)
                _ = try client.hello(.init(user: "bobby".id, status: .away))
                let session = try client.hello(.init(user: "bob".id)).session
                _ = try client.hello(.init(user: "bob2".id))
                // bob's later change marks the end of what each subscriber can have been sent.
                try client.setStatus(session, .away)
                let last: (PresenceRecord) -> Bool = { $0.user.rawValue == "bob" && $0.status == .away }
                let seenByBob = try bob.records(through: last)
                #expect(seenByBob.map(\.user.rawValue) == ["bob", "bob"])
                let seenByAll = try everyone.records(through: last)
                #expect(Set(seenByAll.map(\.user.rawValue)) == ["bob", "bobby", "bob2"])
            }
        }

        /// One query answers 1,000 users in one reply; 1,001 is refused with limit.
        @Test func queryOfAThousandUsers() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                for index in 0..<10 { _ = try client.hello(.init(user: "user\(index)".id, status: .away)) }
                let users = (0..<1_000).map { "user\($0)".id }
                let records = try client.query(users)
                #expect(records.count == 1_000)
                #expect((0..<10).allSatisfy { records["user\($0)".id]?.status == .away })
                #expect(records["user999".id] == .unknown("user999".id))
                #expect(throws: ClientError.self) { try client.query(users + ["one-more".id]) }
                do {
                    _ = try client.query(users + ["one-more".id])
                } catch ClientError.rejected(let error) {
                    #expect(error.code == .limit)
                }
            }
        }

        /// Several sessions of one user add up: the most available status wins and the count is right.
        @Test func sessionsOfOneUserAddUp() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("carol")
                let client = try broker.client()
                let phone = try client.hello(.init(user: "carol".id, device: "phone", status: .away))
                _ = try client.hello(.init(user: "carol".id, device: "laptop", status: .busy, text: "focus"))
                let both = try subscriber.expect("carol") { $0.sessions == 2 }
                #expect(both.status == .busy)
                #expect(both.text == "focus")
                try client.setStatus(phone.session, .online)
                #expect(try subscriber.expect("carol") { $0.status == .online }.sessions == 2)
            }
        }
    }
}

extension Integration {
    @Suite("REQ and DEALER clients", .serialized)
    struct SocketKindTests {
        /// A REQ client works in lock-step and its delimiter is kept: it gets exactly one reply per request.
        @Test func reqClient() async throws {
            try await withBroker { broker in
                let context = try Context()
                let req = try rawSocket(.req, broker.command, context: context)
                for round in 0..<3 {
                    try req.send(#"{"op":"ping","id":\#(round)}"#, wait: true)
                    let reply = try #require(try req.receive(timeout: 3_000))
                    #expect(reply.count == 1)
                    let body = try Codec.decodeReply(reply[0])
                    #expect(body.id == .number("\(round)"))
                    #expect(try Codec.decodeBrokerInfo(body.result.get()).version == rollCallVersion)
                }
                // A bad request gets its error and the REQ socket stays usable.
                try req.send("nonsense", wait: true)
                let error = try #require(try req.receive(timeout: 3_000))
                #expect(try Codec.decodeReply(error[0]).result.error?.code == .badRequest)
                try req.send(#"{"op":"ping"}"#, wait: true)
                #expect(try req.receive(timeout: 3_000) != nil)
            }
        }

        /// A DEALER may pipeline: 200 requests sent at once get 200 replies, in order, ids echoed.
        @Test func dealerPipelines() async throws {
            try await withBroker { broker in
                let context = try Context()
                let dealer = try rawSocket(.dealer, broker.command, context: context)
                for id in 0..<200 { try dealer.send(#"{"op":"query","users":["u\#(id)"],"id":"r\#(id)"}"#, wait: true) }
                for id in 0..<200 {
                    let reply = try #require(try dealer.receive(timeout: 3_000))
                    #expect(reply.count == 1)
                    #expect(try Codec.decodeReply(reply[0]).id == .string("r\(id)"))
                }
                // A DEALER that frames like REQ gets the delimiter back.
                try dealer.send(message: [[], Array(#"{"op":"ping"}"#.utf8)], wait: true)
                let framed = try #require(try dealer.receive(timeout: 3_000))
                #expect(framed.count == 2 && framed[0].isEmpty)
            }
        }
    }
}

extension Result {
    var error: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
