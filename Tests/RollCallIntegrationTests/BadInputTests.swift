import Foundation
import RollCallClient
import RollCallCore
import RollCallTestSupport
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

extension Integration {
    @Suite("Bad input over TCP")
    struct BadInputTests {
        static let badBodies: [(String, ErrorCode)] = [
            ("not json at all", .badRequest),
            ("[1,2,3]", .badRequest),
            ("42", .badRequest),
            (#"{"op":"hello"}"#, .badRequest),
            (#"{"op":"hello","user":7}"#, .badRequest),
            (#"{"op":"hello","user":"alice","status":"asleep"}"#, .badRequest),
            (#"{"op":"hello","user":"alice","ttl_ms":-5}"#, .badRequest),
            (#"{"op":"hello","user":"al ice"}"#, .badUser),
            (#"{"op":"hello","user":"alice","text":"\#(String(repeating: "x", count: 257))"}"#, .badRequest),
            (#"{"op":"status","session":"s","status":"away"}"#, .unknownSession),
            (#"{"op":"status","status":"away"}"#, .badRequest),
            (#"{"op":"heartbeat","session":["s"]}"#, .badRequest),
            (#"{"op":"bye"}"#, .badRequest),
            (#"{"op":"teleport"}"#, .unknownOp),
            (#"{"op":"query","users":"alice"}"#, .badRequest),
            (#"{"op":"query","users":["../etc"]}"#, .badUser),
            (#"{"op":"ping","op":"ping"}"#, .badRequest),
            ("{\"op\":\"ping\"", .badRequest),
            (String(repeating: "[", count: 5_000), .badRequest),
        ]

        /// Each malformed body gets its documented error code, and nobody's presence changes.
        @Test func malformedBodiesAreAnsweredAndChangeNothing() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                _ = try client.hello(.init(user: "alice".id, status: .busy, text: "steady"))
                let before = try client.query(["alice".id, "al".id])
                let subscriber = try broker.subscriber("alice", "marker")
                let context = try Context()
                let dealer = try rawSocket(.dealer, broker.command, context: context)
                for (index, (body, code)) in Self.badBodies.enumerated() {
                    try dealer.send(body, wait: true)
                    let reply = try #require(try dealer.receive(timeout: 3_000), "no reply to bad body #\(index)")
                    let decoded = try Codec.decodeReply(reply[0])
                    #expect(decoded.result.error?.code == code, "body #\(index): \(body.prefix(60))")
                    #expect(decoded.result.error?.message.isEmpty == false)
                }
                _ = try client.hello(.init(user: "marker".id))  // a later change: nothing of alice came before it
                #expect(try subscriber.records(before: "marker").isEmpty)
                let after = try client.query(["alice".id, "al".id])
                #expect(after["alice".id]?.seq == before["alice".id]?.seq)
                #expect(after["alice".id]?.status == .busy)
                #expect(after["al".id] == before["al".id])
            }
        }

        /// Wrong framing is answered bad_request: extra body frames, empty bodies, too many frames.
        @Test func badFramingIsAnswered() async throws {
            try await withBroker { broker in
                let context = try Context()
                let dealer = try rawSocket(.dealer, broker.command, context: context)
                let ping = Array(#"{"op":"ping"}"#.utf8)
                let cases: [[[UInt8]]] = [
                    [ping, ping],  // two body frames
                    [[]],  // only an empty delimiter, no body
                    [[], []],  // delimiter and an empty body
                    Array(repeating: ping, count: 12),  // too many frames
                ]
                for frames in cases {
                    try dealer.send(message: frames, wait: true)
                    let reply = try #require(try dealer.receive(timeout: 3_000))
                    #expect(try Codec.decodeReply(reply.last!).result.error?.code == .badRequest)
                }
                try dealer.send(ping, wait: true)
                let reply = try #require(try dealer.receive(timeout: 3_000))
                #expect(try Codec.decodeReply(reply[0]).result.error == nil)
            }
        }

        /// A body over the configured maximum gets too_large; a frame over the hard limit drops only that connection.
        @Test func oversizedMessages() async throws {
            try await withBroker({ $0.maxMessageBytes = 4_096 }) { broker in
                let context = try Context()
                let dealer = try rawSocket(.dealer, broker.command, context: context)
                let padded = #"{"op":"ping","pad":"\#(String(repeating: "x", count: 5_000))"}"#
                try dealer.send(padded, wait: true)
                let reply = try #require(try dealer.receive(timeout: 3_000))
                #expect(try Codec.decodeReply(reply[0]).result.error?.code == .tooLarge)

                let huge = try rawSocket(.dealer, broker.command, context: context)
                try huge.set(.reconnectInterval(milliseconds: 10_000))
                try huge.send([UInt8](repeating: 0x7B, count: 4 * 4_096 + 1), wait: true)
                #expect(try huge.receive(timeout: 300) == nil)
                // Everyone else is unaffected.
                let client = try broker.client()
                #expect(try client.ping().version.isEmpty == false)
            }
        }

        /// Subscriptions that name no user, group or the broker exactly (a prefix of a user's topic, a topic
        /// without its closing slash, an invalid id, bytes that are no topic) bring no last value: alex, online
        /// before them and matched by the prefixes, is not replayed, and a control subscription made after them is
        /// answered first. Subscribing to `presence/` or to everything is legitimate and tested elsewhere.
        @Test func oddSubscriptionsAreIgnored() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                _ = try client.hello(.init(user: "alex".id, ttlMilliseconds: 600_000))
                let context = try Context()
                let sub = try rawSocket(.sub, broker.update, context: context)
                for topic in [
                    "presence/a b/", "presence/al", "presence/alex", "x", "presence/\u{0}/", "group/", "group/t",
                ] {
                    try sub.set(.subscribe(Array(topic.utf8)))
                }
                try sub.set(.subscribe([0x70, 0xFF, 0xFE]))
                // Subscriptions are read in order: the control one's last value comes after whatever the odd ones
                // would have brought.
                try sub.set(.subscribe(Array("presence/zed/".utf8)))
                let first = try #require(try sub.receive(timeout: 3_000))
                #expect(String(decoding: first[0], as: UTF8.self) == "presence/zed/")
                #expect(try sub.receive(timeout: 200) == nil)
                #expect(try client.ping().time.milliseconds > 0)
            }
        }

        /// A flood of bad messages from several connections never stalls a well-behaved client running alongside:
        /// each of its request pairs is answered within 500 ms (it takes a few ms), every flood message is sent,
        /// and presence afterwards is exactly what the good traffic made it.
        static let floodPerConnection = 20_000
        static let floodTotal = 3 * floodPerConnection

        @Test func floodBesideAGoodClient() async throws {
            try await withBroker({ $0.maxMessageBytes = 4_096 }) { broker in
                let endpoint = broker.command
                let sent = Atomic<Int>(0)  // flood messages libzmq took
                let unsent = Atomic<Int>(0)  // flood messages still not taken when their thread's deadline passed
                let broken = Atomic<Int>(0)  // flood threads that could not connect
                let finished = Atomic<Int>(0)  // flood threads done, one way or another
                let flooders = (0..<3).map { seed in
                    Thread {
                        defer { finished.add(1, ordering: .sequentiallyConsistent) }
                        guard let context = try? Context(),
                            let dealer = try? rawSocket(.dealer, endpoint, context: context)
                        else {
                            broken.add(1, ordering: .relaxed)
                            return
                        }
                        var generator = FloodGenerator(seed: UInt64(seed + 1))
                        let deadline = ContinuousClock.now + .seconds(20)
                        for index in 0..<Self.floodPerConnection {
                            let message = generator.nextMessage()
                            // Count a message only once libzmq took it: at the high-water mark the send is retried
                            // once the socket can take more (or replies came), until the deadline.
                            var taken = (try? dealer.send(message: message)) == true
                            while !taken, ContinuousClock.now < deadline {
                                while (try? dealer.receiveMessage()) != nil {}
                                var poller = Poller([dealer], events: .writable)
                                _ = try? poller.poll(timeout: 10)
                                taken = (try? dealer.send(message: message)) == true
                            }
                            guard taken else {
                                unsent.add(Self.floodPerConnection - index, ordering: .relaxed)
                                return
                            }
                            sent.add(1, ordering: .relaxed)
                            while (try? dealer.receiveMessage()) != nil {}  // read replies so they do not pile up
                        }
                    }
                }
                flooders.forEach { $0.start() }

                let subscriber = try broker.subscriber("good")
                let client = try broker.client(timeout: 2_000)
                let granted = try client.hello(.init(user: "good".id))
                var worst = 0.0
                var duringFlood = 0
                var round = 0
                let deadline = ContinuousClock.now + .seconds(20)
                // Rounds go on as long as the flood does (at least 60), so that they are measured under it.
                while round < 60 || (sent.load(ordering: .relaxed) < Self.floodTotal && ContinuousClock.now < deadline)
                {
                    let start = ContinuousClock.now
                    if sent.load(ordering: .relaxed) < Self.floodTotal { duringFlood += 1 }
                    try client.setStatus(
                        granted.session, round.isMultiple(of: 2) ? .away : .busy, text: "round \(round)")
                    try client.heartbeat(granted.session)
                    worst = max(worst, milliseconds(since: start))
                    round += 1
                }
                let last = round - 1
                // Each flood thread ends by its own 20 s deadline at the latest.
                try await waitFor(seconds: 30) { finished.load(ordering: .sequentiallyConsistent) == 3 }
                print(
                    "flood: \(sent.load(ordering: .relaxed)) bad messages from 3 connections; slowest good round "
                        + "trip pair \(String(format: "%.1f", worst)) ms (\(duringFlood) of \(round) pairs during the flood)"
                )
                #expect(broken.load(ordering: .relaxed) == 0)
                // Every flood message was taken by libzmq (the broker kept reading the flood), or was never sent
                // because its thread could not connect; none was left over when a thread's deadline passed.
                #expect(unsent.load(ordering: .relaxed) == 0, "the broker stopped taking the flood")
                #expect(
                    sent.load(ordering: .relaxed) + broken.load(ordering: .relaxed) * Self.floodPerConnection
                        == Self.floodTotal)
                #expect(duringFlood >= 10, "the flood was over before the good client ran: nothing was shown")
                #expect(worst < 500)
                let final = try client.query(["good".id])["good".id]
                let status: Status = last.isMultiple(of: 2) ? .away : .busy
                #expect(final?.status == status)
                #expect(final?.text == "round \(last)")
                #expect(final?.sessions == 1)
                let record = try subscriber.expect("good") { $0.text == "round \(last)" }
                #expect(record.status == status)
                #expect(try client.ping().epoch == broker.broker.epoch)
            }
        }
    }

}

/// Random and mutated messages for the flood: garbage bytes, broken JSON, wrong types, odd framing.
struct FloodGenerator {
    var random: SplitMix64
    init(seed: UInt64) { random = SplitMix64(seed: seed) }

    mutating func next() -> UInt64 { random.next() }

    static let templates = [
        #"{"op":"hello","user":"good"}"#, #"{"op":"status","session":"x","status":"away"}"#,
        #"{"op":"bye","session":"guess"}"#, #"{"op":"query","users":["good"]}"#, #"{"op":"ping","id":[]}"#,
    ]

    mutating func nextMessage() -> [[UInt8]] {
        switch next() % 6 {
        case 0:  // random bytes
            return [(0..<Int(next() % 200)).map { _ in UInt8(truncatingIfNeeded: next()) }]
        case 1:  // a template with a byte flipped (never a valid hello for "good": it would change presence)
            var bytes = Array(Self.templates[Int(next() % 4) + 1].utf8)
            bytes[Int(next() % UInt64(bytes.count))] ^= UInt8(truncatingIfNeeded: next() | 1)
            return [bytes]
        case 2:  // extra and empty frames
            return Array(repeating: [], count: Int(next() % 4)) + [Array("{}".utf8), Array("{}".utf8)]
        case 3:  // wrong types
            return [Array(#"{"op":"hello","user":{"a":1},"ttl_ms":"soon"}"#.utf8)]
        case 4:  // over the configured maximum
            return [[UInt8](repeating: 0x20, count: 4_097)]
        default:  // unknown sessions
            return [Array(Self.templates[Int(next() % 3) + 1].utf8)]
        }
    }
}
