import Foundation
import RollCallClient
import RollCallCore
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

/// A SUB socket on `group/<id>/` topics, reading group messages.
final class GroupSubscriber {
    let context: Context
    let socket: Socket

    /// Subscribes and waits for each group's aggregate, so the subscriptions are known to be live.
    init(_ broker: InProcessBroker, _ groups: String...) throws {
        context = try Context()
        socket = try rawSocket(.sub, broker.update, context: context)
        for group in groups {
            try socket.set(.subscribe(Array("group/\(group)/".utf8)))
            _ = try next(timeout: 3_000)
        }
    }

    func next(timeout: Int) throws -> GroupUpdate? {
        guard let frames = try socket.receive(timeout: timeout), frames.count == 2 else { return nil }
        return try Codec.decodeGroupUpdate(frames[1])
    }

    /// The next update that carries a change (changed or removed members, or the deletion) within `timeout` ms;
    /// a bare aggregate, as a subscription's last value, is skipped.
    func nextChange(timeout: Int = 1_000) throws -> GroupUpdate {
        try updates(
            until: { update, _ in
                !update.changed.isEmpty || !update.removed.isEmpty || update.deleted
            }, timeout: timeout
        ).last!
    }

    /// Every update up to and including the first that satisfies `last`, which must come within `timeout` ms.
    func updates(until last: (GroupUpdate, [GroupUpdate]) -> Bool, timeout: Int = 3_000) throws -> [GroupUpdate] {
        var updates: [GroupUpdate] = []
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while ContinuousClock.now < deadline {
            guard let update = try next(timeout: 10) else { continue }
            updates.append(update)
            if last(update, updates) { return updates }
        }
        throw TestFailure("the awaited group update did not come within \(timeout) ms; seen: \(updates)")
    }
}

extension String {
    var group: GroupID { GroupID(validating: self)! }
}

extension Integration {
    @Suite("Groups over TCP")
    struct GroupTests {
        /// Five members with three online read "3 of 5"; one going offline, once the creation message's window has
        /// passed (on the test-mode clock), shows as 2 of 5 at once: well within a window.
        @Test func threeOfFiveThenTwo() async throws {
            try await withBroker({ $0.testMode = true }) { broker in
                let client = try broker.client()
                var sessions: [SessionID] = []
                for user in ["ann", "ben", "cat"] { sessions.append(try client.hello(.init(user: user.id)).session) }
                let members = ["ann", "ben", "cat", "dan", "eve"].map(\.id)
                let snapshot = try client.group("team-7".group, GroupEdit(members: members))
                #expect(snapshot.counts.available == 3 && snapshot.counts.total == 5)
                #expect(snapshot.members.count == 5)
                #expect(snapshot.members.first { $0.user == "dan".id } == .unknown("dan".id))

                let subscriber = try GroupSubscriber(broker, "team-7")
                _ = try client.call(.advance(milliseconds: 60))  // the creation message's window passes
                let start = ContinuousClock.now
                try client.bye(sessions[1])
                let update = try subscriber.nextChange()
                let elapsed = milliseconds(since: start)
                print("group: member offline to group message in \(String(format: "%.1f", elapsed)) ms (window 50 ms)")
                #expect(update.counts.available == 2 && update.counts.total == 5)
                #expect(update.changed.map(\.user.rawValue) == ["ben"])
                #expect(update.changed[0].status == .offline)
                // At once (the window is on the monotonic clock, not the frozen test clock); the figure is printed.
                #expect(elapsed < 1_000)
                #expect(update.seq > snapshot.seq)
            }
        }

        /// A new subscriber gets the aggregate at once with no changes; an unknown group answers total 0. (A
        /// subscription that lands inside the creation message's 50 ms window may see that message first, carrying
        /// the same counts: the reads below take the aggregate whenever it comes, within a deadline.)
        @Test func lastValueOnSubscribe() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                _ = try client.hello(.init(user: "ann".id, status: .away))
                _ = try client.group("g".group, GroupEdit(members: ["ann".id, "ben".id]))
                let context = try Context()
                let sub = try rawSocket(.sub, broker.update, context: context)
                /// The next bare aggregate (no changes, no removals, not a deletion) of `group`, within 3 s.
                func aggregate(of group: String) throws -> GroupUpdate {
                    let deadline = ContinuousClock.now + .seconds(3)
                    while ContinuousClock.now < deadline {
                        guard let frames = try sub.receive(timeout: 100) else { continue }
                        let update = try Codec.decodeGroupUpdate(frames[1])
                        if update.group == group.group && update.changed.isEmpty && update.removed.isEmpty
                            && !update.deleted
                        {
                            return update
                        }
                    }
                    throw TestFailure("no aggregate of \(group) within 3 s")
                }
                try sub.set(.subscribe(Array("group/g/".utf8)))
                #expect(try aggregate(of: "g").counts == StatusCounts(away: 1, offline: 1))
                try sub.set(.subscribe(Array("group/unknown/".utf8)))
                #expect(try aggregate(of: "unknown").counts.total == 0)
            }
        }

        /// A member in several groups updates each of them, and no other group.
        @Test func memberOfSeveralGroups() async throws {
            try await withBroker({ $0.presence.groupBatchMilliseconds = 0 }) { broker in
                let client = try broker.client()
                _ = try client.group("g1".group, GroupEdit(members: ["ann".id, "ben".id]))
                _ = try client.group("g2".group, GroupEdit(members: ["ann".id]))
                _ = try client.group("g3".group, GroupEdit(members: ["ben".id]))
                let subscriber = try GroupSubscriber(broker, "g1", "g2", "g3")
                _ = try client.hello(.init(user: "ann".id))
                // ann's updates, then ben's change as a marker (it updates g3): it is made only once ann's are out,
                // so nothing of ann can hide in a message of ben's.
                var updates = try subscriber.updates(until: { _, all in
                    Set(all.map(\.group.rawValue)).isSuperset(of: ["g1", "g2"])
                })
                _ = try client.hello(.init(user: "ben".id))
                updates += try subscriber.updates(until: { update, _ in update.group.rawValue == "g3" })
                    .filter { !$0.changed.contains { $0.user.rawValue == "ben" } }
                updates = updates.filter { !$0.changed.isEmpty }  // not a bare aggregate, which names nobody
                #expect(Set(updates.map(\.group.rawValue)) == ["g1", "g2"])
                #expect(updates.allSatisfy { $0.counts.online == 1 && $0.changed.map(\.user.rawValue) == ["ann"] })
            }
        }

        /// 1,000 members changing within about 20 ms arrive as a few coalesced batches whose union is complete
        /// and whose last counts are right. A batch larger than the message size cap comes in parts whose seqs
        /// follow one another by 1 (they are made at the same instant); a new batch starts a new millisecond.
        @Test func burstIsCoalesced() async throws {
            try await withBroker({ $0.presence.maxGroupSize = 1_000 }) { broker in
                let users = (0..<1_000).map { "m\($0)".id }
                let client = try broker.client()
                let subscriber = try GroupSubscriber(broker, "big")
                for chunk in stride(from: 0, to: 1_000, by: 250) {
                    _ = try client.group("big".group, GroupEdit(add: Array(users[chunk..<chunk + 250])))
                }
                // The edits' messages are out (the last one at the end of its window): none can mix with the burst's.
                _ = try subscriber.updates(until: { update, _ in update.counts.total == 1_000 })

                // Pipelined hellos from one DEALER: 1,000 changes as fast as the broker takes them.
                let context = try Context()
                let dealer = try rawSocket(.dealer, broker.command, context: context)
                let start = ContinuousClock.now
                for user in users { try dealer.send(#"{"op":"hello","user":"\#(user)"}"#, wait: true) }
                for _ in users { _ = try #require(try dealer.receive(timeout: 3_000)) }
                let sendTime = milliseconds(since: start)
                // Up to the message that shows all 1,000 online, once every one has been named in a change.
                let updates = try subscriber.updates(until: { update, all in
                    update.counts == StatusCounts(online: 1_000)
                        && Set(all.flatMap { $0.changed.map(\.user) }).count == users.count
                })
                let previous: [UInt64?] = [nil] + updates.map(\.seq)
                let batches = zip(previous, updates).filter { pair in pair.0.map { $0 + 1 } != pair.1.seq }.count
                print(
                    "group burst: 1000 changes in \(Int(sendTime)) ms arrived as \(batches) batches in "
                        + "\(updates.count) messages")
                #expect(batches <= 2 + Int(sendTime / 50) + 1)
                let seen = Set(updates.flatMap { $0.changed.map(\.user) })
                #expect(seen == Set(users))
                #expect(updates.last?.counts == StatusCounts(online: 1_000))
                #expect(zip(updates, updates.dropFirst()).allSatisfy { $0.seq < $1.seq })
            }
        }

        /// Edits publish added records and removed ids; deletion publishes deleted; seq grows across re-creation.
        @Test func editsAndDeletion() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                let created = try client.group("g".group, GroupEdit(members: ["ann".id, "ben".id]))
                // The creation message went out before this subscription; the edit's comes at its window's end.
                let subscriber = try GroupSubscriber(broker, "g")
                _ = try client.group("g".group, GroupEdit(add: ["cat".id], remove: ["ann".id]))
                let edit = try subscriber.nextChange()
                #expect(edit.changed.map(\.user.rawValue) == ["cat"])
                #expect(edit.removed.map(\.rawValue) == ["ann"])
                #expect(edit.counts.total == 2)
                #expect(try client.group("g".group).members.map(\.user.rawValue) == ["ben", "cat"])

                #expect(try client.ungroup("g".group))
                let deletion = try subscriber.nextChange()
                #expect(deletion.deleted && deletion.seq > edit.seq)
                #expect(try client.ungroup("g".group) == false)
                let read = try client.group("g".group)
                #expect(read.counts.total == 0 && read.members.isEmpty)
                let again = try client.group("g".group, GroupEdit(members: ["dan".id]))
                #expect(again.seq > deletion.seq && again.seq > created.seq)
            }
        }

        /// Bad ids, duplicates, wrong types and bounds get clear errors and change nothing.
        @Test func badGroupRequestsChangeNothing() async throws {
            try await withBroker({
                $0.presence.maxGroupSize = 3
                $0.presence.groupBatchMilliseconds = 0  // the creation message is out at once: seq has settled
            }) { broker in
                let client = try broker.client()
                _ = try client.group("g".group, GroupEdit(members: ["ann".id, "ben".id]))
                let before = try client.group("g".group)
                let context = try Context()
                let dealer = try rawSocket(.dealer, broker.command, context: context)
                let cases: [(String, ErrorCode)] = [
                    (#"{"op":"group","group":"bad id"}"#, .badGroup),
                    (#"{"op":"group","group":"g","members":["ann","ann"]}"#, .badRequest),
                    (#"{"op":"group","group":"g","add":["cat"],"remove":["cat"]}"#, .badRequest),
                    (#"{"op":"group","group":"g","members":["a"],"add":["b"]}"#, .badRequest),
                    (#"{"op":"group","group":"g","add":"cat"}"#, .badRequest),
                    (#"{"op":"group","group":"g","add":[{"user":"cat"}]}"#, .badRequest),
                    (#"{"op":"group","group":"g","add":["c a t"]}"#, .badUser),
                    (#"{"op":"group","group":"g","add":["cat","dan"]}"#, .limit),
                    (#"{"op":"group","group":"g","members":["a","b","c","d"]}"#, .limit),
                    (#"{"op":"ungroup"}"#, .badRequest),
                ]
                for (body, code) in cases {
                    try dealer.send(body, wait: true)
                    let reply = try #require(try dealer.receive(timeout: 3_000))
                    let error = try Codec.decodeReply(reply[0]).result.error
                    #expect(error?.code == code, "\(body)")
                    #expect(error?.message.isEmpty == false)
                }
                let after = try client.group("g".group)
                #expect(after == before)
            }
        }

        /// Several observers of one group each get every update; removing one leaves the others working.
        @Test func observersOfOneGroup() async throws {
            try await withBroker({ $0.presence.groupBatchMilliseconds = 0 }) { broker in
                let client = try broker.client()
                _ = try client.group("g".group, GroupEdit(members: ["ann".id, "ben".id]))
                let watcher = try PresenceWatcher(endpoint: broker.update)
                defer { watcher.close() }
                let seen = Mutex<[Int: [GroupUpdate]]>([:])
                let tokens = (0..<3).map { index in
                    watcher.observe(group: "g".group) { update in
                        seen.withLock { $0[index, default: []].append(update) }
                    }
                }
                func available(_ index: Int) -> [Int] {
                    seen.withLock { $0[index, default: []].map(\.counts.available) }
                }
                try await waitFor { seen.withLock { $0.values.count } == 3 }  // each has the aggregate
                _ = try client.hello(.init(user: "ann".id))
                try await waitFor { (0..<3).allSatisfy { available($0).contains(1) } }
                watcher.remove(tokens[1])
                _ = try client.hello(.init(user: "ben".id, status: .busy))
                // A later edit as a marker: once 0 and 2 have it (total 3), every earlier update was dispatched to
                // every observer still registered.
                _ = try client.group("g".group, GroupEdit(add: ["cat".id]))
                try await waitFor {
                    seen.withLock { state in [0, 2].allSatisfy { state[$0, default: []].last?.counts.total == 3 } }
                }
                let byObserver = seen.withLock { $0 }
                for index in [0, 2] {
                    let online = byObserver[index, default: []].map(\.counts.available)
                    #expect(online.last == 2, "observer \(index) saw \(online)")
                    #expect(online.contains(1))
                }
                #expect(byObserver[1, default: []].map(\.counts.available).contains(2) == false)
                #expect(byObserver[1, default: []].map(\.counts.available).contains(1))
            }
        }

        /// `rollcall group --watch` prints the aggregate lines a person reads.
        @Test func groupCommandPrintsAggregates() async throws {
            try await withBroker { broker in
                let client = try broker.client()
                for user in ["ann", "ben", "cat"] { _ = try client.hello(.init(user: user.id)) }
                let watch = try ChildProcess(
                    ChildProcess.rollcall,
                    [
                        "group", "team-7", "--members", "ann,ben,cat,dan,eve", "--watch", "--command-endpoint",
                        broker.command, "--update-endpoint", broker.update,
                    ])
                defer { watch.terminate() }
                try watch.waitForOutput(containing: "team-7: 3 of 5 online")
                // The command subscribes after printing that line, and nothing shows when its subscription is live:
                // dan comes online until the command prints it (going offline again in between), within a deadline.
                let deadline = ContinuousClock.now + .seconds(10)
                var dan = try client.hello(.init(user: "dan".id)).session
                while (try? watch.waitForOutput(containing: "team-7: 4 of 5 online (+dan)", timeout: 250)) == nil {
                    guard ContinuousClock.now < deadline else { throw TestFailure("never printed: \(watch.stdout)") }
                    try client.bye(dan)
                    dan = try client.hello(.init(user: "dan".id)).session
                }
                try client.bye(dan)
                try await waitFor(seconds: 5) {
                    let output = watch.stdout
                    guard let plus = output.range(of: "team-7: 4 of 5 online (+dan)") else { return false }
                    return output[plus.upperBound...].contains("team-7: 3 of 5 online (-dan)")
                }
                watch.signal(SIGINT)
                #expect(try watch.waitForExit(timeout: 2_000) == 0)
            }
        }
    }
}
