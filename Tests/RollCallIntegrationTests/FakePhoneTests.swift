import RollCallCore
import RollCallTestKit
import Testing

extension Integration {
    /// The test kit's fake phone over the WebSocket door, on the broker's test clock.
    @Suite("The test kit's fake phone")
    struct FakePhoneTests {
        /// Background (offline held 5 s) and foreground 2 s later: watchers see nothing; staying in the background
        /// shows offline exactly when the hold runs out, with the session still open.
        @Test func backgroundAndForeground() async throws {
            try await withTestBroker(webSocket: true) { broker in
                let watch = try broker.watch("alice")
                let phone = FakePhone(url: try #require(broker.webSocketURL), user: "alice".id)
                try await phone.online()
                try watch.expect("alice", status: .online)
                #expect(try await phone.background(after: 5_000))
                try broker.advance(2_000)
                try await phone.foreground()
                try broker.advance(10_000)
                try watch.expectNothing("alice")

                #expect(try await phone.background(after: 5_000))
                try broker.advance(4_999)
                try watch.expectNothing("alice")
                try broker.advance(1)
                try watch.expect("alice", status: .offline, sessions: 1)
                await phone.crash()
            }
        }

        /// A killed phone is offline at once (reason closed); a silent one, whose pings go unanswered, is cut after
        /// two ping intervals of the test clock and goes offline the same way.
        @Test func crashedAndSilentPhones() async throws {
            try await withTestBroker(webSocket: true) { broker in
                let url = try #require(broker.webSocketURL)
                let watch = try broker.watch("bob", "carol")
                let bob = FakePhone(url: url, user: "bob".id)
                try await bob.online()
                try watch.expect("bob", status: .online)
                await bob.crash()
                try watch.expect("bob", status: .offline, reason: .closed, within: 5_000)

                let carol = FakePhone(url: url, user: "carol".id)
                try await carol.online(.busy)
                try watch.expect("carol", status: .busy)
                try broker.advance(30_000)  // idle, answering the pings: still online
                try watch.expectNothing("carol")
                carol.goSilent()
                try broker.advance(10_000)
                try broker.advance(10_000)
                try watch.expect("carol", status: .offline, reason: .closed, within: 5_000)
                await carol.crash()
            }
        }
    }
}
