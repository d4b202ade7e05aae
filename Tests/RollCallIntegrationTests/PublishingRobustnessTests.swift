import Foundation
import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallTestSupport
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

extension Integration {
    @Suite("Publishing under pressure", .serialized)
    struct PublishingRobustnessTests {
        /// A gateway connection holding 20,000 sessions (20 times the update high-water mark) closes: a `presence/`
        /// subscriber that reads flat out receives every one of the 20,000 offline records, and the heartbeat
        /// reports nothing dropped.
        @Test func burstReachesAFastSubscriberWhole() async throws {
            let count = 20_000
            try await withBroker({ $0.updateHighWaterMark = 1_000 }) { broker in
                let context = try Context()
                let gateway = try openSessions(count, on: broker.command, context: context)
                let subscriber = try rawSocket(.sub, broker.update, context: context)
                try subscriber.set(.subscribe(Array("presence/".utf8)))
                try subscriber.set(.subscribe(Array("broker/".utf8)))
                // Subscriptions are read in order: once broker/'s heartbeat is here, presence/ is live too.
                _ = try #require(try subscriber.receive(timeout: 3_000))
                let start = ContinuousClock.now
                gateway.close()
                var offline = Set<String>()
                var dropped: UInt64 = 0
                let deadline = ContinuousClock.now + .seconds(20)
                while offline.count < count, ContinuousClock.now < deadline {
                    guard let frames = try subscriber.receive(timeout: 100), frames.count == 2 else { continue }
                    if frames[0] == Array("broker/".utf8) {
                        dropped = try Codec.decodeBrokerHeartbeat(frames[1]).dropped
                    } else if let record = try? Codec.decodeRecord(frames[1]), record.status == .offline {
                        offline.insert(record.user.rawValue)
                    }
                }
                let elapsed = milliseconds(since: start)
                print(
                    "burst: \(offline.count) of \(count) offline records reached a presence/ subscriber in "
                        + "\(Int(elapsed)) ms (hwm 1000); heartbeat dropped \(dropped)")
                #expect(offline.count == count)
                #expect(dropped == 0)
            }
        }

        /// A watcher whose thread stops reading during 16 MB of updates and a burst of 20,000 offline records misses
        /// updates (the broker goes on without it after `--update-stall-ms`), sees the heartbeat's `dropped` grow
        /// or its heartbeats come back, resynchronises by `query`, and ends up showing all 20,000 users offline.
        @Test func stalledWatcherResynchronises() async throws {
            let count = 20_000
            try await withBroker({
                $0.updateHighWaterMark = 1_000
                $0.updateStallMilliseconds = 200
                $0.brokerHeartbeatMilliseconds = 100
            }) { broker in
                let context = try Context()
                let watcher = try PresenceWatcher(endpoint: broker.update, commandEndpoint: broker.command)
                defer { watcher.close() }
                let shown = Mutex<[String: Status]>([:])
                let stalled = DispatchGroup()  // entered while the observer must not return
                let events = Mutex<[PresenceWatcher.BrokerEvent]>([])
                _ = watcher.observeBroker { event in events.withLock { $0.append(event) } }
                _ = watcher.observeAll { record in
                    stalled.wait()
                    shown.withLock { $0[record.user.rawValue] = record.status }
                }
                try await waitFor(seconds: 5) { events.withLock { !$0.isEmpty } }
                let gateway = try openSessions(count, on: broker.command, context: context)
                try await waitFor(seconds: 20) {
                    shown.withLock { $0.count == count && $0.values.allSatisfy { $0 == .online } }
                }

                stalled.enter()
                // 16 MB of another user's changes fill the watcher's buffers first (far more than its TCP buffers
                // hold while it does not read), so that the broker goes on without it while the offline records
                // follow.
                let noise = try RequestPipeline(endpoint: broker.command)
                let session = try noise.call(.hello(.init(user: "noise".id, ttlMilliseconds: 600_000)))["session"]!
                    .string!
                let text = String(repeating: "x", count: 250)
                for index in 0..<40_000 {
                    let status = index.isMultiple(of: 2) ? "away" : "busy"
                    try noise.send(
                        Array(#"{"op":"status","session":"\#(session)","status":"\#(status)","text":"\#(text)"}"#.utf8))
                }
                try noise.drain()
                gateway.close()
                // An independent subscriber of broker/ tells when the broker went on without the watcher.
                let heartbeats = try rawSocket(.sub, broker.update, context: context)
                try heartbeats.set(.subscribe(Array("broker/".utf8)))
                var dropped: UInt64 = 0
                let deadline = ContinuousClock.now + .seconds(10)
                while dropped == 0, ContinuousClock.now < deadline {
                    guard let frames = try heartbeats.receive(timeout: 100), frames.count == 2 else { continue }
                    dropped = try Codec.decodeBrokerHeartbeat(frames[1]).dropped
                }
                let start = ContinuousClock.now
                stalled.leave()
                try await waitFor(seconds: 20) {
                    shown.withLock { state in state.allSatisfy { $0.key == "noise" || $0.value == .offline } }
                }
                let elapsed = milliseconds(since: start)
                let noticed = events.withLock {
                    $0.filter { $0 != .lost && $0 != .connected(epoch: broker.broker.epoch) }
                }
                print(
                    "stalled watcher: broker dropped \(dropped) updates for it; all \(count) users shown offline "
                        + "\(Int(elapsed)) ms after it resumed (events: \(noticed))")
                #expect(dropped > 0)
                #expect(
                    noticed.contains(.fellBehind(epoch: broker.broker.epoch))
                        || noticed.contains(.recovered(epoch: broker.broker.epoch)))
            }
        }

        /// A subscriber that reads, but far slower than updates come, cannot hold the others to its pace: with
        /// `--update-stall-ms` 200, every update that reaches a subscriber reading flat out does so within 200 ms
        /// plus a margin for this machine, and if it missed any (one that is full at the moment the broker sends
        /// past full subscribers misses too), the heartbeat's `dropped` says so.
        @Test func slowReaderDelaysOthersAtMostTheStallTime() async throws {
            let count = 20_000
            try await withBroker({
                $0.updateHighWaterMark = 1_000
                $0.updateStallMilliseconds = 200
                $0.brokerHeartbeatMilliseconds = 100
            }) { broker in
                let context = try Context()
                let slow = try Socket(context, .sub)
                try slow.set(.receiveHighWaterMark(10))
                try slow.set(.receiveBuffer(bytes: 65_536))
                try slow.set(.subscribe(Array("presence/".utf8)))
                try slow.connect(broker.update)
                let fast = try rawSocket(.sub, broker.update, context: context)
                try fast.set(.subscribe(Array("presence/".utf8)))
                try fast.set(.subscribe(Array("broker/".utf8)))
                _ = try #require(try fast.receive(timeout: 3_000))  // subscriptions live
                let running = Atomic<Bool>(true)
                let threads = DispatchGroup()
                let slowHandOff = HandOff(slow)
                threads.enter()
                Thread {
                    let slow = slowHandOff.take()
                    while running.load(ordering: .sequentiallyConsistent) {
                        _ = try? slow.receive(timeout: 10)
                        // A reader that falls behind, not one that stopped: this paces it and decides nothing.
                        pause(milliseconds: 50)
                    }
                    threads.leave()
                }.start()
                let arrivals = Mutex<[(ContinuousClock.Instant, [UInt8])]>([])
                let dropped = Atomic<UInt64>(0)
                let fastHandOff = HandOff(fast)
                threads.enter()
                Thread {
                    let fast = fastHandOff.take()
                    while running.load(ordering: .sequentiallyConsistent) {
                        guard let frames = try? fast.receive(timeout: 10), frames.count == 2 else { continue }
                        let now = ContinuousClock.now
                        if frames[0] == Array("broker/".utf8) {
                            let heartbeat = try? Codec.decodeBrokerHeartbeat(frames[1])
                            dropped.store(heartbeat?.dropped ?? 0, ordering: .sequentiallyConsistent)
                            continue
                        }
                        arrivals.withLock { $0.append((now, frames[1])) }
                    }
                    threads.leave()
                }.start()

                let pipeline = try RequestPipeline(endpoint: broker.command)
                let session = try pipeline.call(.hello(.init(user: "talker".id, ttlMilliseconds: 600_000)))[
                    "session"]!.string!
                let padding = String(repeating: "x", count: 240)
                var sent: [ContinuousClock.Instant] = []
                for index in 0..<count {
                    // 5,000 updates a second, which a reader that reads flat out keeps up with: pacing the sender,
                    // not waiting for anything; it decides nothing.
                    if index.isMultiple(of: 100) { pause(milliseconds: 20) }
                    sent.append(.now)
                    let status = index.isMultiple(of: 2) ? "away" : "busy"
                    try pipeline.send(
                        Array(
                            #"{"op":"status","session":"\#(session)","status":"\#(status)","text":"\#(index) \#(padding)"}"#
                                .utf8))
                }
                try pipeline.drain()
                let drained = ContinuousClock.now
                try await waitFor(seconds: 20) {
                    arrivals.withLock {
                        $0.last.flatMap { try? Codec.decodeRecord($0.1) }?.text?.hasPrefix("\(count - 1) ") == true
                    }
                }
                // A heartbeat sent after the last update counts everything before it.
                let settled = arrivals.withLock { $0.count }
                try await waitFor(seconds: 5) {
                    arrivals.withLock { $0.count } == settled && milliseconds(since: drained) > 500
                }
                running.store(false, ordering: .sequentiallyConsistent)
                threads.wait()
                var delays: [Double] = []
                for (arrival, body) in arrivals.withLock({ $0 }) {
                    guard let record = try? Codec.decodeRecord(body), record.user.rawValue == "talker",
                        let index = record.text?.split(separator: " ").first.flatMap({ Int($0) })
                    else { continue }
                    let delay = arrival - sent[index]
                    delays.append(
                        Double(delay.components.seconds) * 1_000 + Double(delay.components.attoseconds) / 1e15)
                }
                let slowest = delays.max() ?? .infinity
                let counted = dropped.load(ordering: .sequentiallyConsistent)
                print(
                    "slow reader: the fast subscriber got \(delays.count) of \(count) updates (8 MB in 4 s), the slowest "
                        + "\(Int(slowest)) ms after its request was sent (stall 200 ms); heartbeat dropped \(counted)")
                #expect(slowest < 1_000)
                #expect(delays.count == count)
            }
        }

        /// Subscriptions longer than any topic are refused by libzmq before they are stored (150 of 250 KB, the
        /// finding's 37.5 MB), and 5,000 distinct topics of the longest valid length cost a bounded amount each;
        /// all the while the broker answers `ping` within 100 ms.
        @Test func subscriptionsAreBounded() async throws {
            let broker = try BrokerProcess(executable: ChildProcess.rollcall, arguments: [])
            defer { broker.stop() }
            let client = try CommandClient(endpoint: broker.command)
            _ = try client.ping()  // up and answering
            let before = broker.residentBytes()
            var slowest = 0.0
            func ping() throws {
                let start = ContinuousClock.now
                _ = try client.ping()
                slowest = max(slowest, milliseconds(since: start))
            }

            // Distinct subscriptions of 250 KB each, as in the finding: libzmq drops the peer at the first one's
            // header, so the rest are never read (a new connection each time, as a client would reconnect).
            var refused = 0
            for index in 0..<150 {
                let peer = try RawZMTPPeer(broker.update, socketType: "SUB")
                var topic = [UInt8(1)] + Array("presence/".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 250_000)
                topic[10] = UInt8(ascii: "a") + UInt8(index % 26)
                topic[11] = UInt8(ascii: "a") + UInt8(index / 26)
                if !peer.send(frame: topic) || !peer.send(frame: topic) { refused += 1 }
                if index.isMultiple(of: 10) { try ping() }
            }
            // The update endpoint still serves a new subscriber (its last value comes), and the broker answers.
            let probe = try RawZMTPPeer(broker.update, socketType: "SUB")
            try probe.expectTopic("presence/probe-long/")
            try ping()
            let afterLong = broker.residentBytes()

            let many = try RawZMTPPeer(broker.update, socketType: "SUB")
            var random = SplitMix64(seed: 8)
            let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8)
            let count = 5_000
            var failed = 0
            for index in 0..<count {
                let user = (0..<UserID.maxLength).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
                if !many.send(frame: [1] + Array("presence/".utf8) + user + [UInt8(ascii: "/")]) { failed += 1 }
                if index.isMultiple(of: 250) { try ping() }
            }
            // A connection's subscriptions are read in order: once a last value subscribed after the 5,000 comes, all
            // of them are stored.
            try many.expectTopic("presence/probe-many/")
            try ping()
            let afterMany = broker.residentBytes()
            let longGrowth = afterLong - before
            let perSubscription = (afterMany - afterLong) / count
            print(
                "subscriptions: 150 x 250 KB (\(refused) connections dropped early) grew RSS by "
                    + "\(longGrowth / 1_024) KiB; \(count) distinct longest topics "
                    + "grew it by \((afterMany - afterLong) / 1_024) KiB (\(perSubscription) bytes each); "
                    + "slowest ping \(String(format: "%.1f", slowest)) ms")
            #expect(longGrowth < 32 * 1_048_576)
            #expect(failed == 0)
            #expect(afterMany - afterLong < count * 16_384)
            #expect(slowest < 1_000, "no stall (the figure is printed, not a target)")
        }

        /// 200,000 subscriptions to `presence/alice/` cannot drown a `presence/` watcher: it sees every one of
        /// bob's 100 changes, and alice's last value goes out at most once per 100 ms.
        @Test func subscriptionSpamDoesNotDrownUpdates() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                _ = try client.hello(.init(user: "alice".id, status: .busy))
                let bob = try client.hello(.init(user: "bob".id))
                let watcher = try PresenceWatcher(endpoint: broker.update)
                defer { watcher.close() }
                let seen = Mutex<(alice: Int, bob: Set<UInt64>, marker: Status?)>((0, [], nil))
                _ = watcher.observeAll { record in
                    seen.withLock { state in
                        if record.user.rawValue == "alice" { state.alice += 1 }
                        if record.user.rawValue == "bob" { state.bob.insert(record.seq) }
                        if record.user.rawValue == "marker" { state.marker = record.status }
                    }
                }
                // The watcher's presence/ is live once a change of another user reaches it (a prefix brings no last
                // value): the marker changes until one does, within a deadline.
                let marker = try client.hello(.init(user: "marker".id, ttlMilliseconds: 600_000)).session
                var away = false
                try await waitFor(seconds: 5) {
                    guard seen.withLock({ $0.marker }) == nil else { return true }
                    away.toggle()
                    _ = try? client.setStatus(marker, away ? .away : .online)
                    return false
                }
                let context = try Context()
                let spammer = try rawSocket(.sub, broker.update, context: context)
                try spammer.set(.receiveHighWaterMark(1))
                try spammer.set(.sendHighWaterMark(0))  // every subscription goes out
                let topic = Array("presence/alice/".utf8)
                let start = ContinuousClock.now
                for index in 0..<200_000 {
                    try spammer.set(.subscribe(topic))
                    if index.isMultiple(of: 2_000) {
                        try client.setStatus(bob.session, index.isMultiple(of: 4_000) ? .away : .online)
                    }
                }
                let spamTime = milliseconds(since: start)
                try await waitFor(seconds: 10) { seen.withLock { $0.bob.count } >= 100 }
                // A later change as a marker: everything published before it has reached the watcher.
                try client.setStatus(marker, .busy)
                try await waitFor(seconds: 5) { seen.withLock { $0.marker } == .busy }
                let (alice, bobSeen) = seen.withLock { ($0.alice, $0.bob.count) }
                print(
                    "subscription spam: 200,000 subscribes in \(Int(spamTime)) ms; the watcher saw \(bobSeen) of "
                        + "bob's 100 changes and \(alice) last values of alice")
                #expect(bobSeen == 100)
                #expect(alice <= Int(milliseconds(since: start) / 100) + 2)
            }
        }

        /// A subscriber of a 4,000-member group's topic that never reads, while the group's members are added and
        /// removed 300 times, costs the broker a bounded number of bytes: group messages are split into parts of
        /// at most 16 KiB, which a reading subscriber receives whole and in order.
        @Test func stalledGroupSubscriberCostIsBounded() async throws {
            let broker = try BrokerProcess(
                executable: ChildProcess.rollcall,
                arguments: ["--update-hwm", "500", "--update-queue-bytes", "4194304", "--group-batch-ms", "0"])
            defer { broker.stop() }
            let context = try Context()
            let stalled = try Socket(context, .sub)
            try stalled.set(.receiveHighWaterMark(10))
            try stalled.set(.receiveBuffer(bytes: 65_536))
            try stalled.set(.subscribe(Array("group/g/".utf8)))
            try stalled.connect(broker.update)
            let reader = try rawSocket(.sub, broker.update, context: context)
            try reader.set(.subscribe(Array("group/g/".utf8)))
            _ = try #require(try reader.receive(timeout: 3_000))
            let received = Mutex<(count: Int, largest: Int, last: GroupUpdate?, undecodable: Int)>((0, 0, nil, 0))
            let reading = Atomic<Bool>(true)
            let readerThread = HandOff(reader)
            let done = DispatchSemaphore(value: 0)
            Thread {
                let reader = readerThread.take()
                while reading.load(ordering: .sequentiallyConsistent) {
                    guard let frames = try? reader.receive(timeout: 50), frames.count == 2 else { continue }
                    guard let update = try? Codec.decodeGroupUpdate(frames[1]) else {
                        received.withLock { $0.undecodable += 1 }
                        continue
                    }
                    received.withLock { state in
                        state = (state.count + 1, max(state.largest, frames[1].count), update, state.undecodable)
                    }
                }
                done.signal()
            }.start()
            // The stalled subscriber's subscription counts: its last value (the only message it reads) is here.
            _ = try #require(try stalled.receive(timeout: 3_000))
            let before = broker.residentBytes()
            let pipeline = try RequestPipeline(endpoint: broker.command, window: 1)
            let members = (0..<4_000).map { "member-\($0)" }
            let list = "[" + members.map { "\"\($0)\"" }.joined(separator: ",") + "]"
            for edit in 0..<300 {
                let field = edit.isMultiple(of: 2) ? "add" : "remove"
                try pipeline.send(Array(#"{"op":"group","group":"g","\#(field)":\#(list)}"#.utf8))
            }
            try pipeline.drain()
            try await waitFor(seconds: 20) { received.withLock { $0.last?.counts.total == 0 } }
            let growth = broker.residentBytes() - before
            reading.store(false, ordering: .sequentiallyConsistent)
            done.wait()
            let (count, largest, undecodable) = received.withLock { ($0.count, $0.largest, $0.undecodable) }
            print(
                "stalled group subscriber: 300 edits of 4,000 members; broker RSS grew \(growth / 1_024) KiB "
                    + "(hwm 500, queue 4 MiB); a reader got \(count) messages, the largest \(largest) bytes")
            #expect(pipeline.failures == 0)
            #expect(largest <= BrokerConfiguration.maxGroupMessageBytes)
            #expect(undecodable == 0)
            #expect(growth < 40 * 1_048_576)
        }

        /// A peer of the update endpoint that sends 20 MB of empty frames, each saying more follows, is held whole
        /// by libzmq (a known weakness): the cost per byte sent stays under 48 bytes, and the broker keeps answering
        /// within 100 ms.
        @Test func endlessMultipartOnTheUpdateEndpoint() async throws {
            let broker = try BrokerProcess(executable: ChildProcess.rollcall, arguments: [])
            defer { broker.stop() }
            let client = try CommandClient(endpoint: broker.command)
            let peer = try RawZMTPPeer(broker.update, socketType: "XSUB")  // returns once the handshake is over
            _ = try client.ping()
            let before = broker.residentBytes()
            let megabytes = 20
            let chunk = (0..<1_048_576).map { UInt8($0 % 2 == 0 ? 0x01 : 0) }
            var slowest = 0.0
            for _ in 0..<megabytes {
                #expect(peer.write(chunk))  // 524,288 empty frames, each flagged "more"
                let start = ContinuousClock.now
                _ = try client.ping()
                slowest = max(slowest, milliseconds(since: start))
            }
            // libzmq has read every byte sent: none waits in either side's TCP queues.
            let port = Int(broker.update.split(separator: ":").last!)!
            try await waitFor(seconds: 10) { tcpQueuesEmpty(port: port) }
            let growth = broker.residentBytes() - before
            let start = ContinuousClock.now
            _ = try client.ping()
            slowest = max(slowest, milliseconds(since: start))
            print(
                "endless multipart: \(megabytes) MB of empty frames grew broker RSS by \(growth / 1_048_576) MiB "
                    + "(\(growth / (megabytes * 1_048_576)) bytes per byte sent); slowest ping "
                    + String(format: "%.1f", slowest) + " ms")
            #expect(growth < 48 * megabytes * 1_048_576)
            #expect(slowest < 1_000, "no stall (the figure is printed, not a target)")
        }
    }
}

/// Opens `count` sessions, one user each, on one DEALER connection (an app server or gateway), and returns it. At
/// most 500 requests are in flight, well below the broker's 1,000 unread replies (protocol §3.2).
private func openSessions(_ count: Int, on endpoint: String, context: Context) throws -> Socket {
    let gateway = try rawSocket(.dealer, endpoint, context: context)
    var answered = 0
    for index in 0..<count {
        while index - answered >= 500 {
            guard try gateway.receive(timeout: 10_000) != nil else { throw TestFailure("no reply within 10 s") }
            answered += 1
        }
        try gateway.send(#"{"op":"hello","user":"gw\#(index)","ttl_ms":600000}"#, wait: true)
    }
    while answered < count {
        guard try gateway.receive(timeout: 10_000) != nil else { throw TestFailure("no reply within 10 s") }
        answered += 1
    }
    return gateway
}

/// A peer that speaks ZMTP 3.0 over a plain TCP socket, to send what libzmq's own sockets would not: subscriptions
/// that it does not also store on the sending side, and frames that never end a message.
final class RawZMTPPeer {
    private let descriptor: Int32

    /// Connects to `endpoint` (`tcp://127.0.0.1:port`) and greets as a `socketType` (SUB or XSUB) with NULL security.
    init(_ endpoint: String, socketType: String) throws {
        guard let port = UInt16(endpoint.split(separator: ":").last ?? "") else { throw TestFailure("bad endpoint") }
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw TestFailure("cannot connect to \(endpoint)") }
        var greeting = [UInt8](repeating: 0, count: 64)
        greeting[0] = 0xFF
        greeting[9] = 0x7F
        greeting[10] = 3  // version 3.0
        for (index, byte) in "NULL".utf8.enumerated() { greeting[12 + index] = byte }
        var ready = [UInt8(5)] + Array("READY".utf8) + [UInt8(11)] + Array("Socket-Type".utf8)
        ready += [0, 0, 0, UInt8(socketType.utf8.count)] + Array(socketType.utf8)
        _ = write(greeting + [0x04, UInt8(ready.count)] + ready)
        // Frames sent before the handshake is over are refused: wait for the broker's greeting and READY.
        let header = try read(64 + 2)
        _ = try read(Int(header[65]))
    }

    private func read(_ count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var offset = 0
        while offset < count {
            let got = bytes.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress! + offset, count - offset, 0) }
            guard got > 0 else { throw TestFailure("the broker closed the connection during the handshake") }
            offset += got
        }
        return bytes
    }

    deinit { close(descriptor) }

    /// The next frame's body, or `nil` after `timeout` ms without one or once the connection is closed.
    func receiveFrame(timeout: Int) -> [UInt8]? {
        var waiting = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&waiting, 1, Int32(timeout)) > 0, let flags = try? read(1) else { return nil }
        let size: Int
        if flags[0] & 0x02 != 0 {
            guard let bytes = try? read(8) else { return nil }
            size = bytes.reduce(0) { $0 << 8 | Int($1) }
        } else {
            guard let byte = try? read(1) else { return nil }
            size = Int(byte[0])
        }
        return try? read(size)
    }

    /// Subscribes to `topic` (an exact presence topic) and reads frames until its last value's topic frame comes,
    /// within `timeout` ms: every subscription this peer sent before has been read by then.
    func expectTopic(_ topic: String, timeout: Int = 10_000) throws {
        guard send(frame: [1] + Array(topic.utf8)) else { throw TestFailure("the broker closed the connection") }
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while ContinuousClock.now < deadline {
            if receiveFrame(timeout: 100) == Array(topic.utf8) { return }
        }
        throw TestFailure("no last value of \(topic) within \(timeout) ms")
    }

    /// Sends one frame; `false` once the broker has closed the connection.
    @discardableResult
    func send(frame body: [UInt8], more: Bool = false) -> Bool {
        var header: [UInt8]
        if body.count > 255 {
            header = [0x02 | (more ? 0x01 : 0)]
            header += (0..<8).reversed().map { UInt8(truncatingIfNeeded: UInt64(body.count) >> ($0 * 8)) }
        } else {
            header = [more ? 0x01 : 0, UInt8(body.count)]
        }
        return write(header + body)
    }

    /// Writes raw bytes; `false` once the broker has closed the connection.
    @discardableResult
    func write(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes {
                Glibc.send(descriptor, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }
}
