import Foundation
import RollCallClient
import RollCallCore
import RollCallTestKit
import RollCallWire
import Testing
import ZeroMQ

/// A DEALER connection of its own, speaking raw requests; closing it closes its TCP connection.
final class RawClient {
    let context: Context
    let socket: Socket

    init(_ endpoint: String) throws {
        context = try Context()
        socket = try rawSocket(.dealer, endpoint, context: context)
    }

    func call(_ body: String) throws -> [JSONKey: JSON] {
        try socket.send(body, wait: true)
        guard let reply = try socket.receive(timeout: 3_000) else { throw TestFailure("no reply to \(body)") }
        return try Codec.decodeReply(reply[0]).result.get()
    }

    func hello(_ user: String) throws -> String {
        try call(#"{"op":"hello","user":"\#(user)"}"#)["session"]!.string!
    }

    func close() { socket.close() }
}

extension Integration {
    @Suite("Connection loss over TCP")
    struct ConnectionLossTests {
        /// A client whose connection drops and who comes back with the same session over a new connection within
        /// the grace period produces no offline message at all. (On the test kit's manual clock: the grace is
        /// reached by advance, not by waiting; pastGraceGoesOffline keeps the real clock.)
        @Test func comingBackWithinGraceDoesNotFlicker() async throws {
            try await withTestBroker({ $0.presence.offlineGraceMilliseconds = 500 }) { broker in
                let watch = try broker.watch("ivy")
                let ivy = try broker.user("ivy").online()
                try watch.expect("ivy", status: .online)
                try await ivy.crash()
                try broker.advance(200)
                try ivy.reconnect()  // the same session over a new connection
                try broker.advance(800)
                try watch.expectNothing("ivy")
                #expect(try broker.query("ivy")["ivy".id]?.status == .online)
            }
        }

        /// Past the grace period the session ends with reason closed, within the grace plus 50 ms of the drop.
        @Test func pastGraceGoesOffline() async throws {
            try await withBroker({ $0.presence.offlineGraceMilliseconds = 300 }) { broker in
                let subscriber = try broker.subscriber("jack")
                let client = try RawClient(broker.command)
                _ = try client.hello("jack")
                try subscriber.expect("jack") { $0.status == .online }
                client.close()
                let dropped = ContinuousClock.now
                let record = try subscriber.expect("jack", timeout: 2_000) { $0.status == .offline }
                let elapsed = milliseconds(since: dropped)
                print("connection closed, grace 300 ms: offline after \(Int(elapsed)) ms")
                #expect(record.reason == .closed)
                #expect(elapsed >= 250 && elapsed < 300 + 50)
            }
        }

        /// The death of an old connection never ends a session that has moved to a newer one (fencing).
        @Test func oldConnectionCannotEndAMovedSession() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("kim")
                let old = try RawClient(broker.command)
                let session = try old.hello("kim")
                try subscriber.expect("kim") { $0.status == .online }
                let new = try RawClient(broker.command)
                _ = try new.call(#"{"op":"heartbeat","session":"\#(session)"}"#)
                old.close()
                #expect(try subscriber.collect(for: 300).isEmpty)
                new.close()
                #expect(try subscriber.expect("kim", timeout: 1_000) { $0.status == .offline }.reason == .closed)
            }
        }

        /// A user available through another connection stays available when one connection closes.
        @Test func anotherConnectionKeepsTheUserOnline() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("lea")
                let phone = try RawClient(broker.command)
                let laptop = try RawClient(broker.command)
                _ = try phone.hello("lea")
                _ = try laptop.hello("lea")
                try subscriber.expect("lea") { $0.sessions == 2 }
                phone.close()
                let record = try subscriber.expect("lea", timeout: 1_000) { $0.sessions == 1 }
                #expect(record.status == .online && record.reason == nil)
            }
        }

        /// A bye sent just before the connection closes still counts as a bye: requests are read before connection
        /// events, and libzmq queues a connection's last requests before its DISCONNECTED.
        @Test func byeJustBeforeClosingIsABye() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("mia")
                for _ in 0..<10 {
                    let client = try RawClient(broker.command)
                    let session = try client.hello("mia")
                    try subscriber.expect("mia") { $0.status == .online }
                    try client.socket.send(#"{"op":"bye","session":"\#(session)"}"#, wait: true)
                    client.close()
                    #expect(try subscriber.expect("mia") { $0.status == .offline }.reason == .bye)
                }
            }
        }

        /// A hello from a client that closes without waiting for the reply leaves no session behind.
        @Test func helloThenCloseLeavesNoSession() async throws {
            try await withBroker { broker in
                for round in 0..<20 {
                    let client = try RawClient(broker.command)
                    try client.socket.send(#"{"op":"hello","user":"gone\#(round)"}"#, wait: true)
                    pause(milliseconds: round % 3)
                    client.close()
                }
                pause(milliseconds: 300)
                let records = try broker.client().query((0..<20).map { "gone\($0)".id })
                #expect(records.values.allSatisfy { $0.sessions == 0 })
            }
        }

        /// Connections that come and go reuse file descriptors; each one's close ends only its own sessions.
        @Test func reusedDescriptorsAreNotConfused() async throws {
            try await withBroker { broker in
                let subscriber = try PresenceSubscriber(endpoint: broker.update)
                try subscriber.subscribeAll()
                pause(milliseconds: 100)
                for round in 0..<30 {
                    let client = try RawClient(broker.command)
                    _ = try client.hello("churn\(round)")
                    client.close()
                }
                let steady = try RawClient(broker.command)
                _ = try steady.hello("steady")
                pause(milliseconds: 300)
                let records = try broker.client().query((0..<30).map { "churn\($0)".id } + ["steady".id])
                #expect((0..<30).allSatisfy { records["churn\($0)".id]?.reason == .closed })
                #expect(records["steady".id]?.status == .online)
            }
        }
    }
}
