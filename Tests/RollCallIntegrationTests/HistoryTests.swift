import Dispatch
import Foundation
import RollCallClient
import RollCallCore
import RollCallStore
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

@testable import RollCallBroker

/// The presence log against a real `rollcall serve` in test mode on a data directory (docs/history.md).
extension Integration {
    @Suite("Presence log: history, events, query at, retention, restarts")
    struct HistoryTests {
        /// Every transition is in the log in order, with the offset its published record carried; `history` and
        /// `events` page with `next`; `ping` reports where the log stands.
        @Test func transitionsPageInOrder() async throws {
            let broker = try ServeProcess(extra: ["--test-mode"])
            try broker.start()
            defer { _ = broker.signal(SIGTERM) }
            let watcher = try PresenceWatcher(endpoint: broker.update)
            defer { watcher.close() }
            let seen = Mutex<[PresenceRecord]>([])
            _ = watcher.observe("alice".id) { record in seen.withLock { $0.append(record) } }
            let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 2_000)
            try await waitFor(seconds: 5) { seen.withLock { !$0.isEmpty } }  // subscribed: the never-seen record

            let alice = try client.hello(.init(user: "alice".id)).session
            try client.setStatus(alice, .away, text: "lunch")
            _ = try client.hello(.init(user: "bob".id))
            try client.bye(alice)

            let history = try client.history(HistoryQuery(user: "alice".id, limit: 10))
            #expect(history.entries.map(\.record.status) == [.online, .away, .offline])
            #expect(history.entries.map(\.record.user) == ["alice".id, "alice".id, "alice".id])
            #expect(history.entries.map(\.offset) == history.entries.map(\.offset).sorted())
            #expect(history.entries.allSatisfy { $0.record.offset == $0.offset })
            #expect(history.next == nil)
            let ping = try client.ping()
            #expect(ping.log?.epoch == history.position.epoch)
            #expect(ping.log?.offset == history.position.offset)

            // What subscribers received carries the same offsets.
            try await waitFor(seconds: 5) { seen.withLock { $0.last?.status == .offline } }
            // A record may come twice (a replay of the current record repeats it, same seq and offset): once each.
            var once = Set<UInt64>()
            let published = seen.withLock { $0 }.filter { $0.seq > 0 }.compactMap(\.offset).filter {
                once.insert($0).inserted
            }
            #expect(published == history.entries.map(\.offset))

            // `history` pages two at a time.
            let first = try client.history(HistoryQuery(user: "alice".id, limit: 2))
            #expect(first.entries.count == 2)
            let next = try #require(first.next)
            let second = try client.history(HistoryQuery(user: "alice".id, after: next, limit: 2))
            #expect((first.entries + second.entries).map(\.offset) == history.entries.map(\.offset))

            // `events`: every user's transitions in offset order, paged, from 0.
            var feed: [LogEntry] = []
            var cursor: UInt64 = 0
            while true {
                let page = try client.events(after: cursor, logEpoch: ping.log?.epoch, limit: 3)
                feed += page.entries
                guard let more = page.next else { break }
                cursor = more
            }
            #expect(feed.map(\.record.user.rawValue) == ["alice", "alice", "bob", "alice"])
            #expect(feed.last?.offset == ping.log?.offset)
        }

        /// `query` with `at` tells each user's record at a time on the test clock; a cursor from another epoch, ahead
        /// of the log, or trimmed away is `snapshot_required`; so is a time before the retention.
        @Test func queryAtRetentionAndSnapshots() async throws {
            let broker = try ServeProcess(extra: ["--test-mode", "--history-retention-ms", "60000"])
            try broker.start()
            defer { _ = broker.signal(SIGTERM) }
            let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 2_000)
            let start = try client.ping().time
            let alice = try client.hello(.init(user: "alice".id, ttlMilliseconds: 3_600_000)).session
            _ = try client.call(.advance(milliseconds: 1_000))
            try client.setStatus(alice, .busy)
            _ = try client.call(.advance(milliseconds: 1_000))

            #expect(try client.query(["alice".id, "carol".id], at: start + 500)["alice".id]?.status == .online)
            #expect(try client.query(["alice".id], at: start + 1_500)["alice".id]?.status == .busy)
            #expect(try client.query(["carol".id], at: start + 1_500)["carol".id]?.seq == 0)
            #expect(rejection { try client.query(["alice".id], at: start + 60_000) } == .badRequest)  // the future

            let epoch = try #require(try client.ping().log?.epoch)
            #expect(rejection { try client.events(after: 0, logEpoch: "0000000000000000") } == .snapshotRequired)
            #expect(rejection { try client.events(after: UInt64(Int64.max)) } == .snapshotRequired)
            let old = try client.events(after: 0, logEpoch: epoch)
            #expect(old.entries.map(\.record.status) == [.online, .busy])

            // Two minutes later, with a change since, the first transition is past the retention: trimmed in the
            // background (alice's latest before the cut-off stays, it still tells her state after it).
            _ = try client.call(.advance(milliseconds: 120_000))
            try client.setStatus(alice, .away)
            try await waitFor(seconds: 10) {
                rejection { try client.events(after: 0) } == .snapshotRequired
            }
            #expect(rejection { try client.query(["alice".id], at: start + 500) } == .snapshotRequired)
            let now = try client.ping().time
            #expect(try client.query(["alice".id], at: now + (-60_000))["alice".id]?.status == .busy)
            let kept = try client.history(HistoryQuery(user: "alice".id, limit: 10))
            #expect(kept.entries.map(\.record.status) == [.busy, .away])
            let resumed = try client.events(after: kept.entries[0].offset, logEpoch: epoch)
            #expect(resumed.entries.map(\.record.status) == [.away])
        }

        /// The log, its epoch and its offsets survive kill -9; new offsets continue above every offset handed out.
        @Test func killNineKeepsTheLog() async throws {
            let broker = try ServeProcess(extra: ["--test-mode"])
            try broker.start()
            let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 2_000)
            let alice = try client.hello(.init(user: "alice".id)).session
            try client.setStatus(alice, .away)
            let before = try client.ping()
            let epoch = try #require(before.log?.epoch)
            let written = try PresenceLog(directory: broker.dataDirectory)
            // `ping` reports what is out, at most: the status may still be on its way to the file.
            try await waitFor(seconds: 5) { (try? written.events(after: 0, limit: 10))?.count == 2 }
            let handedOut = try #require(try written.events(after: 0, limit: 10).last?.offset)
            #expect(try #require(before.log?.offset) <= handedOut)
            _ = broker.signal(SIGKILL)
            try broker.start()
            defer { _ = broker.signal(SIGTERM) }
            let again = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 2_000)
            let after = try again.ping()
            #expect(after.log?.epoch == epoch)
            #expect(after.epoch != before.epoch)  // a new run of the broker, the same log
            _ = try again.hello(.init(user: "bob".id))
            let page = try again.events(after: 0, logEpoch: epoch)
            #expect(page.entries.map(\.record.user.rawValue) == ["alice", "alice", "bob"])
            #expect(page.entries[2].offset > handedOut)
        }

        /// A subscriber never sees a transition a crash can take from the log: changes stream in, the broker is
        /// killed with SIGKILL as soon as a subscriber has seen some, and every record that subscriber received is in
        /// the file afterwards, with the offset and seq it was published with (publications wait for the commit:
        /// docs/history.md, "Durability").
        @Test func whatASubscriberSawSurvivesKillNine() async throws {
            let broker = try ServeProcess()
            try broker.start()
            let context = try Context()
            defer { context.terminate() }
            let subscriber = try rawSocket(.sub, broker.update, context: context)
            defer { subscriber.close() }
            try subscriber.set(.subscribe(Array("presence/".utf8)))
            let dealer = try rawSocket(.dealer, broker.command, context: context)
            defer { dealer.close() }
            // The subscription is in place once a first user's record comes.
            var received: [PresenceRecord] = []
            let deadline = ContinuousClock.now + .seconds(10)
            while received.isEmpty, ContinuousClock.now < deadline {
                try dealer.send(Array(#"{"op":"hello","user":"w0","ttl_ms":600000}"#.utf8), wait: true)
                _ = try #require(try dealer.receive(timeout: 3_000), "hello's reply")
                if let frames = try subscriber.receive(timeout: 100) {
                    received.append(try Codec.decodeRecord(frames[1]))
                }
            }
            // Statuses change while the subscriber reads: each change is a transition.
            let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 3_000)
            let sessions = try (0..<50).map { try client.hello(.init(user: UserID(validating: "u\($0)")!)).session }
            for index in 0..<4_000 {
                let status = index / 50 % 2 == 0 ? "away" : "online"
                let body = #"{"op":"status","session":"\#(sessions[index % 50])","status":"\#(status)"}"#
                try dealer.send(Array(body.utf8), wait: true)
            }
            while received.count < 300, let frames = try subscriber.receive(timeout: 3_000) {
                received.append(try Codec.decodeRecord(frames[1]))
            }
            #expect(broker.signal(SIGKILL) != nil)
            // What was already on its way to the subscriber counts too.
            while let frames = try subscriber.receive(timeout: 200) {
                received.append(try Codec.decodeRecord(frames[1]))
            }
            #expect(received.count >= 300)
            let logged = try PresenceLog(directory: broker.dataDirectory).events(after: 0, limit: 100_000)
            let byOffset = Dictionary(logged.map { ($0.offset, $0.record) }, uniquingKeysWith: { first, _ in first })
            let missing = received.filter { record in
                guard let offset = record.offset, let kept = byOffset[offset] else { return true }
                return kept.user != record.user || kept.seq != record.seq || kept.status != record.status
            }
            #expect(missing.isEmpty, "published and not in the log: \(missing.prefix(5))")
        }

        /// A read waits for the commit of what was made before it, not of what comes after: under a steady stream of
        /// changes from another connection every read is still answered (each within the client's 5 s timeout).
        @Test func readsAreAnsweredUnderAStreamOfChanges() async throws {
            let broker = try ServeProcess()
            try broker.start()
            defer { _ = broker.signal(SIGTERM) }
            let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 5_000)
            let sessions = try (0..<20).map { try client.hello(.init(user: UserID(validating: "s\($0)")!)).session }
            let streaming = Atomic<Bool>(true)
            let endpoint = broker.command
            let stream = Thread {
                guard let context = try? Context(), let dealer = try? rawSocket(.dealer, endpoint, context: context)
                else { return }
                var index = 0
                while streaming.load(ordering: .relaxed) {
                    let status = index / 20 % 2 == 0 ? "away" : "online"
                    let body = #"{"op":"status","session":"\#(sessions[index % 20])","status":"\#(status)"}"#
                    _ = try? dealer.send(Array(body.utf8), wait: true)
                    while (try? dealer.receive(timeout: 0)) != nil {}
                    index += 1
                }
                dealer.close()
                context.terminate()
            }
            stream.start()
            defer { streaming.store(false, ordering: .relaxed) }
            for _ in 0..<5 {
                let page = try client.history(HistoryQuery(user: "s0".id, limit: 10))
                #expect(!page.entries.isEmpty)
                _ = try client.events(after: 0, logEpoch: nil, limit: 10)
            }
        }

        /// `--publish-before-commit` turns the wait off: `ping` reports an acknowledged change's offset at once, before
        /// any commit (without the flag it reports only what is out, which the commit decides).
        @Test func publishBeforeCommitWaitsForNothing() async throws {
            let broker = try ServeProcess(extra: ["--publish-before-commit"])
            try broker.start()
            defer { _ = broker.signal(SIGTERM) }
            let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 2_000)
            let alice = try client.hello(.init(user: "alice".id)).session
            for status in [Status.away, .busy, .online, .away] {
                try client.setStatus(alice, status)
                let reported = try #require(try client.ping().log?.offset)
                let latest = try #require(try client.history(HistoryQuery(user: "alice".id, limit: 1_000)).entries.last)
                #expect(latest.record.status == status)
                #expect(reported == latest.offset)
            }
        }

        /// A read of the log in the same loop round as the transitions it shows (pipelined requests) still leaves
        /// them to be written: the file ends up holding every transition.
        @Test func aReadInTheSameRoundLosesNothing() async throws {
            let broker = try ServeProcess(extra: ["--test-mode"])
            try broker.start()
            defer { _ = broker.signal(SIGTERM) }
            let context = try Context()
            defer { context.terminate() }
            let dealer = try rawSocket(.dealer, broker.command, context: context)
            defer { dealer.close() }
            let bodies = (0..<20).flatMap { index in
                [#"{"op":"hello","user":"p\#(index)","ttl_ms":600000}"#, #"{"op":"events","after":0,"limit":1000}"#]
            }
            for body in bodies { try dealer.send(Array(body.utf8), wait: true) }
            for _ in bodies { _ = try #require(try dealer.receive(timeout: 3_000), "a reply") }
            let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 2_000)
            let head = try #require(try client.ping().log?.offset)
            let written = try PresenceLog(directory: broker.dataDirectory)
            try await waitFor(seconds: 5) {
                (try? written.events(after: 0, limit: 100))?.count == 20
            }
            #expect(try written.events(after: 0, limit: 100).last?.offset == head)
        }

        /// Without a log (retention 0) every read of it is `no_history`, and `ping` reports no offset; bad reads are
        /// `bad_request` and change nothing.
        @Test func noLogAndBadReads() async throws {
            let off = try ServeProcess(extra: ["--test-mode", "--history-retention-ms", "0"])
            try off.start()
            defer { _ = off.signal(SIGTERM) }
            let client = try CommandClient(endpoint: off.command, timeoutMilliseconds: 2_000)
            _ = try client.hello(.init(user: "alice".id))
            #expect(try client.ping().log == nil)
            #expect(rejection { try client.events(after: 0) } == .noHistory)
            #expect(rejection { try client.history(HistoryQuery(user: "alice".id, limit: 1)) } == .noHistory)

            let context = try Context()
            defer { context.terminate() }
            let dealer = try rawSocket(.dealer, off.command, context: context)
            defer { dealer.close() }
            for body in [
                #"{"op":"events"}"#, #"{"op":"events","after":-1}"#, #"{"op":"events","after":0,"limit":0}"#,
                #"{"op":"events","after":0,"limit":1001}"#, #"{"op":"history"}"#,
                #"{"op":"history","user":"alice","after":"x"}"#, #"{"op":"query","users":["alice"],"at":"now"}"#,
            ] {
                try dealer.send(Array(body.utf8), wait: true)
                let reply = try #require(try dealer.receive(timeout: 3_000), "no reply to \(body)")
                let decoded = try Codec.decodeReply(reply[0])
                #expect(decoded.result.error?.code == .badRequest, "\(body)")
            }
            #expect(try client.query(["alice".id])["alice".id]?.status == .online)
        }
    }
}

extension Integration {
    @Suite("Presence log: resuming a WebSocket subscription")
    struct HistoryResumeTests {
        /// A watcher that reconnects and subscribes with `after` (the offset of the last record it saw) gets exactly
        /// the transitions it missed, in order, then the live ones: nothing missing, nothing twice, no last value.
        @Test func resumeDeliversExactlyWhatWasMissed() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try await withGateway({ $0.storage = .directory(directory) }) { gateway in
                let command = try CommandClient(endpoint: gateway.broker.command, timeoutMilliseconds: 2_000)
                let subscribe = #"{"op":"subscribe","id":"s","topics":["presence/alice/","presence/bob/"]}"#
                let first = try await gateway.client(token: gateway.token("watcher"))
                _ = try await first.call(subscribe, id: "s")
                let alice = try command.hello(.init(user: "alice".id, ttlMilliseconds: 600_000)).session
                let online = try Self.message(try await first.expect { $0.contains(#""status":"online""#) })
                let seen = try #require(online[JSONKey("offset")]?.integer)
                first.close()

                try command.setStatus(alice, .away)
                try command.setStatus(alice, .busy, text: "call")
                _ = try command.hello(.init(user: "bob".id, ttlMilliseconds: 600_000))
                _ = try command.hello(.init(user: "carol".id, ttlMilliseconds: 600_000))  // not followed

                let epoch = try #require(try command.ping().log?.epoch)
                let second = try await gateway.client(token: gateway.token("watcher"))
                let bogus = try await second.call(
                    #"{"op":"subscribe","id":"x","topics":["presence/alice/"],"after":1,"log_epoch":"nope"}"#, id: "x")
                #expect(WebSocketTests.code(bogus) == "snapshot_required")
                let resumed = try await second.call(
                    #"{"op":"subscribe","id":"r","topics":["presence/alice/","presence/bob/"],"after":\#(seen),"log_epoch":"\#(epoch)"}"#,
                    id: "r")
                #expect(resumed[JSONKey("ok")] == .bool(true))
                try command.bye(alice)  // live, after the resume
                var updates: [[JSONKey: JSON]] = []
                while updates.last?[JSONKey("status")] != .string("offline") {
                    guard let frame = try await second.next(timeout: 5_000) else { break }
                    updates.append(try Self.message(frame))
                }
                #expect(
                    updates.map { "\($0[JSONKey("user")]?.string ?? "?") \($0[JSONKey("status")]?.string ?? "?")" } == [
                        "alice away", "alice busy", "bob online", "alice offline",
                    ])
                let offsets = updates.compactMap { $0[JSONKey("offset")]?.integer }
                #expect(offsets.count == 4 && offsets == offsets.sorted() && offsets[0] > seen)
            }
        }

        /// A resume owes at most one page (1,000 transitions) in all: 600 missed for each of two followed users is
        /// refused with `snapshot_required`, though neither alone is over; 600 of one with 600 of a user not
        /// followed is delivered whole.
        @Test func aResumeOwingMoreThanAPageInAllIsRefused() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try await withGateway({ $0.storage = .directory(directory) }) { gateway in
                let command = try CommandClient(endpoint: gateway.broker.command, timeoutMilliseconds: 2_000)
                let alice = try command.hello(.init(user: "alice".id, ttlMilliseconds: 600_000)).session
                let bob = try command.hello(.init(user: "bob".id, ttlMilliseconds: 600_000)).session
                let carol = try command.hello(.init(user: "carol".id, ttlMilliseconds: 600_000)).session
                let ping = try #require(try command.ping().log)
                for index in 0..<600 {
                    let status: Status = index.isMultiple(of: 2) ? .away : .busy
                    for session in [alice, bob, carol] { try command.setStatus(session, status) }
                }
                let watcher = try await gateway.client(token: gateway.token("watcher"))
                let resume = { (id: String, topics: String) in
                    #"{"op":"subscribe","id":"\#(id)","topics":[\#(topics)],"after":\#(ping.offset),"log_epoch":"\#(ping.epoch)"}"#
                }
                let both = try await watcher.call(resume("both", #""presence/alice/","presence/bob/""#), id: "both")
                #expect(WebSocketTests.code(both) == "snapshot_required")
                let one = try await watcher.call(resume("one", #""presence/alice/""#), id: "one")
                #expect(one[JSONKey("ok")] == .bool(true))
                var updates = 0
                while updates < 600, try await watcher.next(timeout: 5_000) != nil { updates += 1 }
                #expect(updates == 600)
            }
        }

        /// The file is read off the loop: while the reader is held inside a resume, the loop answers other requests
        /// and publishes. The resumed subscriber then gets the reply, what it missed before its request (read from
        /// the file), what was published while the file was read (kept by the loop for it), then the live ones: in
        /// order, none twice.
        @Test func aResumeIsReadOffTheLoop() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let gate = DispatchSemaphore(value: 0)
            let entered = Atomic<Int>(0)
            let holding = Atomic<Bool>(true)
            let configure = { (configuration: inout BrokerConfiguration) in
                configuration.storage = .directory(directory)
                configuration.logReadHook = {
                    entered.add(1, ordering: .sequentiallyConsistent)
                    if holding.load(ordering: .sequentiallyConsistent) { gate.wait() }
                }
            }
            try await withGateway(configure) { gateway in
                let command = try CommandClient(endpoint: gateway.broker.command, timeoutMilliseconds: 2_000)
                let start = try #require(try command.ping().log)
                let alice = try command.hello(.init(user: "alice".id, ttlMilliseconds: 600_000)).session
                let watcher = try await gateway.client(token: gateway.token("watcher"))
                // A resume the token may not make is refused before anything is read (the reader would hold it).
                let everyone = try await watcher.call(
                    #"{"op":"subscribe","id":"f","topics":["presence/"],"after":\#(start.offset)}"#, id: "f")
                #expect(WebSocketTests.code(everyone) == "forbidden")
                #expect(entered.load(ordering: .sequentiallyConsistent) == 0)
                try await watcher.send(
                    #"{"op":"subscribe","id":"r","topics":["presence/alice/"],"after":\#(start.offset),"log_epoch":"\#(start.epoch)"}"#
                )
                try ClusterFixture.until("the reader took the resume") {
                    entered.load(ordering: .sequentiallyConsistent) >= 1 ? true : nil
                }
                // The reader is held: the loop still answers, and publishes alice's change.
                try command.setStatus(alice, .away)
                #expect(try command.ping().log?.offset ?? 0 > start.offset)
                // A second watcher asks for a resume, which waits behind the held read, and goes away before it is
                // answered: its read is dropped, or its answer finds nobody (whichever the loop sees first), and
                // nothing else changes.
                let leaving = try await gateway.client(token: gateway.token("leaving"))
                _ = try await leaving.call(#"{"op":"ping","id":"p"}"#, id: "p")
                try await leaving.send(
                    #"{"op":"subscribe","id":"l","topics":["presence/alice/"],"after":\#(start.offset)}"#)
                leaving.close()
                holding.store(false, ordering: .sequentiallyConsistent)
                gate.signal()
                // The reply comes first: nothing of the topic can come before it.
                let reply = try await watcher.expect { _ in true }
                #expect(reply.contains(#""id":"r""#) && reply.contains(#""ok":true"#), "\(reply)")
                try command.setStatus(alice, .busy, text: "call")  // live
                var updates: [[JSONKey: JSON]] = []
                while updates.last?[JSONKey("status")] != .string("busy") {
                    guard let frame = try await watcher.next(timeout: 5_000) else { break }
                    updates.append(try Self.message(frame))
                }
                #expect(updates.map { $0[JSONKey("status")]?.string ?? "?" } == ["online", "away", "busy"])
                let offsets = updates.compactMap { $0[JSONKey("offset")]?.integer }
                #expect(offsets.count == 3 && offsets == offsets.sorted() && offsets[0] > start.offset)
                #expect(try command.ping().log?.offset ?? 0 >= offsets[2], "the broker answers on")
            }
        }

        /// The record inside an update frame.
        static func message(_ frame: String) throws -> [JSONKey: JSON] {
            guard case .object(let fields) = try JSONParser.parse(Array(frame.utf8)),
                case .object(let message)? = fields[JSONKey("message")]
            else { throw TestFailure("not an update: \(frame)") }
            return message
        }
    }
}
