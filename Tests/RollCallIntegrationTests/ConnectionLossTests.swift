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
                let subscriber = try broker.subscriber("kim", "marker")
                let old = try RawClient(broker.command)
                let session = try old.hello("kim")
                try subscriber.expect("kim") { $0.status == .online }
                let new = try RawClient(broker.command)
                _ = try new.call(#"{"op":"heartbeat","session":"\#(session)"}"#)
                old.close()
                try await broker.waitForStatus { $0.connections == 1 }  // the broker has seen the old one close
                let marker = try RawClient(broker.command)
                defer { marker.close() }
                _ = try marker.hello("marker")
                #expect(try subscriber.records(before: "marker").isEmpty)
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

        /// A hello from a client that closes without waiting for the reply leaves no session behind: once the broker
        /// has seen every connection close, each user has no session, and a user that was put online at all was
        /// put offline again (reason `closed`) before a later marker's record; the broker still answers.
        @Test func helloThenCloseLeavesNoSession() async throws {
            try await withBroker { broker in
                let users = (0..<20).map { "gone\($0)" }
                let subscriber = try PresenceSubscriber(endpoint: broker.update)
                for user in users + ["marker"] {
                    try subscriber.subscribe(user.id)
                    try subscriber.expect(user) { _ in true }  // its last value: the subscription is live
                }
                for (round, user) in users.enumerated() {
                    let client = try RawClient(broker.command)
                    try client.socket.send(#"{"op":"hello","user":"\#(user)"}"#, wait: true)
                    // Varies where the close falls against the hello's handling (0, 1 or 2 ms); decides nothing.
                    pause(milliseconds: round % 3)
                    client.close()
                }
                // The broker's own view: every one of those connections closed, and no session left.
                try await broker.waitForStatus { $0.connections == 0 && $0.sessions == 0 }
                // A marker on a new connection: every record of the gone users was published before the marker's.
                let marker = try RawClient(broker.command)
                defer { marker.close() }
                _ = try marker.hello("marker")
                let seen = Dictionary(grouping: try subscriber.records(before: "marker"), by: \.user.rawValue)
                for user in users {
                    let records = seen[user] ?? []
                    // Each online record is followed by the offline one of the close, and nothing is left online.
                    let statuses = records.map(\.status)
                    let alternates = statuses.enumerated().allSatisfy {
                        $1 == ($0.isMultiple(of: 2) ? .online : .offline)
                    }
                    #expect(alternates && statuses.count.isMultiple(of: 2), "\(user): \(records)")
                    #expect(records.filter { $0.status == .offline }.allSatisfy { $0.reason == .closed }, "\(records)")
                }
                let records = try broker.client().query(users.map(\.id) + ["marker".id])
                #expect(users.allSatisfy { records[$0.id]?.sessions == 0 && records[$0.id]?.status == .offline })
                #expect(records["marker".id]?.sessions == 1)
            }
        }

        /// Connections that come and go reuse file descriptors; each one's close ends only its own sessions.
        @Test func reusedDescriptorsAreNotConfused() async throws {
            try await withBroker { broker in
                for round in 0..<30 {
                    let client = try RawClient(broker.command)
                    _ = try client.hello("churn\(round)")
                    client.close()
                }
                let steady = try RawClient(broker.command)
                _ = try steady.hello("steady")
                // The broker has seen every churn connection close: only steady's is left, with its one session.
                try await broker.waitForStatus { $0.connections == 1 && $0.sessions == 1 }
                let records = try broker.client().query((0..<30).map { "churn\($0)".id } + ["steady".id])
                #expect((0..<30).allSatisfy { records["churn\($0)".id]?.reason == .closed })
                #expect(records["steady".id]?.status == .online)
            }
        }
    }
}
