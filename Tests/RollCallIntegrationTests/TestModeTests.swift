import Foundation
import RollCallBroker
import RollCallClient
import RollCallTestKit
import Testing

extension Integration {
    @Suite("Test mode and the test kit")
    struct TestModeTests {
        /// The seeds' story, end to end, on the broker's manual clock: alice online on two devices; one crashes and
        /// she stays online; the other freezes and she goes offline with reason timeout once the TTL is reached by
        /// advance; the group header goes from 3 of 5 to 2 of 5; later she drops and comes back within the grace
        /// period with no offline record. It takes well under a second.
        @Test func theStory() async throws {
            let start = ContinuousClock.now
            try await withTestBroker({
                $0.presence.defaultTTLMilliseconds = 3_000
                $0.presence.offlineGraceMilliseconds = 2_000
            }) { broker in
                let watch = try broker.watch("alice")
                let team = try broker.watchGroup("team", members: ["alice", "bob", "carol", "dave", "erin"])
                let phone = try broker.user("alice", device: "phone").online()
                let desktop = try broker.user("alice", device: "desktop").online(.busy, text: "in a meeting")
                try broker.user("bob").online()
                try broker.user("carol").online(.away)
                try watch.expect("alice", status: .online, sessions: 2)  // online wins over busy
                try team.expect(online: 3, total: 5)

                try await phone.crash()
                try broker.advance(2_000)  // the phone's grace runs out; the desktop heartbeats on the way
                try watch.expect("alice", status: .busy, sessions: 1)

                desktop.freeze()
                try broker.advance(3_000)
                try watch.expect("alice", status: .offline, reason: .timeout)
                try team.expect(online: 2, total: 5)

                let laptop = try broker.user("alice", device: "laptop").online()
                try watch.expect("alice", status: .online)
                try team.expect(online: 3, total: 5)
                try await laptop.crash()
                try broker.advance(1_000)
                try laptop.reconnect()  // within the grace: the session carries on over the new connection
                try broker.advance(3_000)
                try watch.expectNothing("alice")
                #expect(try broker.query("alice")["alice".id]?.status == .online)
            }
            // Printed, not asserted: how long a test takes is a figure, not a rule (a shared machine is noisy).
            let seconds = milliseconds(since: start) / 1_000
            print("test kit: the story ran in \(String(format: "%.3f", seconds)) s")
        }

        /// Two watchers of one user on a broker in test mode, subscribed one right after the other, both get the
        /// user's current record without the test moving the broker's clock: the coalescing of replays protects the
        /// broker on the monotonic clock, and never waits for an `advance` (the seeds' "two listeners" scenario).
        @Test func secondWatcherGetsTheCurrentRecordWithoutAdvance() async throws {
            try await withTestBroker { broker in
                try broker.user("alice").online(.away, text: "lunch")
                let first = try PresenceSubscriber(endpoint: broker.update)
                let second = try PresenceSubscriber(endpoint: broker.update)
                try first.subscribe("alice".id)
                try second.subscribe("alice".id)
                let one = try first.next(timeout: 5_000)
                let two = try second.next(timeout: 5_000)
                #expect(one?.status == .away && one?.text == "lunch")
                #expect(two?.status == .away && two?.text == "lunch")
                #expect(one?.seq == two?.seq)
            }
        }

        /// A failed expectation says what was expected and what was seen instead.
        @Test func failedExpectationsSayWhatWasSeen() async throws {
            try await withTestBroker { broker in
                let watch = try broker.watch("zed")
                try broker.user("zed").online(.away)
                do {
                    try watch.expect("zed", status: .busy, within: 100)
                    Issue.record("the expectation passed")
                } catch let failure as TestKitFailure {
                    #expect(failure.description.contains("no record of zed with status busy within 100 ms"))
                    #expect(failure.description.contains("seen: away 1 session"))
                    #expect(!failure.description.contains("1 sessions"))
                }
                let team = try broker.watchGroup("t", members: ["zed"])
                #expect(throws: TestKitFailure.self) { try team.expect(online: 0, total: 1, within: 100) }
            }
        }

        /// advance fires each deadline at its own time: a TTL of 3 s is not reached after 2,999 ms and is after
        /// 3,000, and the record is stamped with the expiry time, not with the end of a longer advance.
        @Test func advanceFiresDeadlinesInOrderAtTheirTime() async throws {
            try await withTestBroker { broker in
                let watch = try broker.watch("tia")
                let tia = try broker.user("tia").online()
                try watch.expect("tia", status: .online)
                tia.freeze()
                let start = try broker.now()
                try broker.advanceClock(2_999)
                try watch.expectNothing("tia", within: 100)
                try broker.advanceClock(10_001)
                let offline = try watch.expect("tia", status: .offline, reason: .timeout)
                #expect(offline.lastSeen == start + 3_000)
                #expect(try broker.now() == start + 13_000)
            }
        }

        /// Outside test mode advance is an unknown op and the clock is the real one.
        @Test func advanceIsUnknownOutsideTestMode() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                #expect(throws: ClientError.rejected(PresenceError(.unknownOp, "unknown op 'advance'"))) {
                    try client.call(.advance(milliseconds: 1_000))
                }
                #expect(try client.ping().testMode == false)
            }
        }

        /// `serve --test-mode --print-endpoints` prints one JSON line with free loopback endpoints once ready, says
        /// so in ping, and refuses a non-loopback endpoint or a data directory.
        @Test func serveInTestMode() async throws {
            let child = try ChildProcess(ChildProcess.rollcall, ["serve", "--test-mode", "--print-endpoints"])
            defer { child.terminate() }
            let line = try child.waitForOutput(containing: #""test_mode":true"#)
            let fields = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let command = try #require(fields["command"] as? String)
            #expect(command.hasPrefix("tcp://127.0.0.1:"))
            #expect(try CommandClient(endpoint: command).ping().testMode)
            #expect(child.stderr.contains("TEST MODE"))
            child.signal(SIGTERM)
            #expect(try child.waitForExit(timeout: 5_000) == 0)

            let open = try await ChildProcess.run(
                ChildProcess.rollcall, ["serve", "--test-mode", "--command-endpoint", "tcp://0.0.0.0:*"])
            #expect(open.status != 0)
            #expect(open.stderr.contains("must be a loopback, ipc:// or inproc:// endpoint in --test-mode"))
        }

        /// The shell example of docs/testing.md runs the story with the CLI against `serve --test-mode` and passes.
        @Test func shellStoryPasses() async throws {
            let script = ChildProcess.repositoryRoot.appendingPathComponent("docs/examples/story.sh").path
            let child = try ChildProcess("/bin/bash", [script], environment: ["ROLLCALL_BIN": ChildProcess.rollcall])
            defer { child.terminate() }
            let status = try child.waitForExit(timeout: 30_000)
            print(child.stdout)
            #expect(status == 0, "\(child.stderr)")
            #expect(child.stdout.contains("2 of 5 online"))
        }
    }
}

extension Integration.TestModeTests {
    /// A held status (`after_ms`) over ZeroMQ on the broker's manual clock: nothing is published until it comes
    /// due, then the record; a status set back within the window cancels the held one and nothing is ever published.
    @Test func heldStatusComesDueOnTheTestClock() async throws {
        try await withTestBroker { broker in
            let watch = try broker.watch("alice")
            let client = try CommandClient(endpoint: broker.command)
            let session = try client.hello(.init(user: "alice".id, ttlMilliseconds: 600_000)).session
            let online = try watch.expect("alice", status: .online)

            #expect(try client.setStatus(session, .offline, after: 5_000))
            try broker.advance(4_999)
            try watch.expectNothing("alice")
            try broker.advance(1)
            let offline = try watch.expect("alice", status: .offline, sessions: 1)
            #expect(offline.seq > online.seq)

            try client.setStatus(session, .online)
            let back = try watch.expect("alice", status: .online)
            #expect(try client.setStatus(session, .away, text: "lunch", after: 5_000))
            try broker.advance(2_000)
            try client.setStatus(session, .online)  // back before it came due: cancelled
            try broker.advance(10_000)
            try watch.expectNothing("alice")
            let now = try #require(try broker.query("alice")["alice".id])
            #expect(now.status == .online && now.seq == back.seq && now.since == back.since)
            // Holding what the session already has holds nothing.
            #expect(try client.setStatus(session, .online, after: 5_000) == false)
        }
    }
}
