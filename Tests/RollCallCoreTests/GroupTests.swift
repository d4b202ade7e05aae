import RollCallCore
import Testing

extension String {
    var group: GroupID { GroupID(validating: self)! }
}

extension Harness {
    mutating func group(_ id: String, _ edit: GroupEdit = GroupEdit()) -> Result<GroupSnapshot, PresenceError> {
        core.group(id.group, edit, now: now)
    }

    mutating func define(_ id: String, _ members: [String]) -> GroupSnapshot {
        try! group(id, GroupEdit(members: members.map(\.id))).get()
    }
}

@Suite("Groups")
struct GroupTests {
    /// Five members with three available (online, away, busy) read 3 of 5, with per-status counts and records.
    @Test func aggregateCountsAvailableMembers() throws {
        var h = Harness()
        _ = h.open("a")
        _ = h.open("b", status: .away)
        _ = h.open("c", status: .busy)
        _ = h.open("d", status: .offline)
        let snapshot = h.define("team", ["a", "b", "c", "d", "e"])
        #expect(snapshot.counts == StatusCounts(online: 1, busy: 1, away: 1, offline: 2))
        #expect(snapshot.counts.available == 3)
        #expect(snapshot.counts.total == 5)
        #expect(snapshot.members.map(\.user.rawValue) == ["a", "b", "c", "d", "e"])
        #expect(snapshot.members[4] == .unknown("e".id))
        #expect(snapshot.seq > 0)
    }

    /// A member's effective status counts once, by precedence, however many sessions they hold.
    @Test func membersCountByEffectiveStatus() {
        var h = Harness()
        let phone = h.open("a", status: .away)
        _ = h.open("a", status: .busy)
        _ = h.define("g", ["a"])
        #expect(h.core.snapshot(of: "g".group, now: h.now).counts == StatusCounts(busy: 1))
        _ = h.core.setStatus(session: phone, status: .online, text: nil, now: h.now)
        #expect(h.core.snapshot(of: "g".group, now: h.now).counts == StatusCounts(online: 1))
    }

    /// The first change is published at once; later ones within the window wait for it and are coalesced.
    @Test func batchWindowCoalesces() throws {
        var h = Harness()
        let sessions = (0..<5).map { h.open("m\($0)") }
        _ = h.define("g", (0..<5).map { "m\($0)" })
        let created = h.core.flushGroups(now: h.now)
        #expect(created.count == 1)
        #expect(created[0].changed.count == 5)  // every member is new

        h.clock.advance(10)
        _ = h.core.bye(session: sessions[0], now: h.now)
        #expect(h.core.flushGroups(now: h.now).isEmpty)  // previous message 10 ms ago: wait for the window
        #expect(h.core.nextDeadline == h.now + 40)
        h.clock.advance(20)
        _ = h.core.setStatus(session: sessions[1], status: .away, text: nil, now: h.now)
        _ = h.core.bye(session: sessions[2], now: h.now)
        h.clock.advance(19)
        #expect(h.core.flushGroups(now: h.now).isEmpty)
        h.clock.advance(1)
        let batchFlushed = h.core.flushGroups(now: h.now)
        let batch = try #require(batchFlushed.first)
        #expect(batch.changed.map(\.user.rawValue) == ["m0", "m1", "m2"])
        #expect(batch.counts == StatusCounts(online: 2, away: 1, offline: 2))
        #expect(batch.seq > created[0].seq)
        // The aggregate a new subscriber gets takes its own seq, and the next batch a higher one.
        let header = h.core.groupHeader(of: "g".group, now: h.now)
        #expect(header.seq > batch.seq && header.changed.isEmpty)
        h.clock.advance(60)
        _ = h.core.bye(session: sessions[4], now: h.now)
        let nextFlushed = h.core.flushGroups(now: h.now)
        let next = try #require(nextFlushed.first)
        #expect(next.seq > header.seq)

        // A quiet group costs nothing: no deadline, nothing to flush.
        #expect(h.core.nextDeadline == h.now + 2_890)  // only the sessions' expiry is left
        h.clock.advance(500)
        #expect(h.core.flushGroups(now: h.now).isEmpty)
        // After a quiet window, a change goes out at once.
        _ = h.core.bye(session: sessions[3], now: h.now)
        #expect(h.core.flushGroups(now: h.now).first?.changed.map(\.user.rawValue) == ["m3"])
        #expect(h.core.snapshot(of: "g".group, now: h.now).counts == StatusCounts(online: 0, away: 1, offline: 4))
    }

    /// Editing with add and remove publishes the added members' records and the removed ids.
    @Test func editsPublishAddedAndRemoved() throws {
        var h = Harness()
        _ = h.open("a")
        _ = h.open("c", status: .busy)
        _ = h.define("g", ["a", "b"])
        _ = h.core.flushGroups(now: h.now)
        h.clock.advance(100)
        let snapshot = try h.group("g", GroupEdit(add: ["c".id], remove: ["b".id])).get()
        #expect(snapshot.members.map(\.user.rawValue) == ["a", "c"])
        #expect(snapshot.counts == StatusCounts(online: 1, busy: 1))
        let updateFlushed = h.core.flushGroups(now: h.now)
        let update = try #require(updateFlushed.first)
        #expect(update.changed.map(\.user.rawValue) == ["c"])
        #expect(update.removed.map(\.rawValue) == ["b"])
        // Replacing the members works the same way.
        h.clock.advance(100)
        _ = try h.group("g", GroupEdit(members: ["b".id])).get()
        let replacedFlushed = h.core.flushGroups(now: h.now)
        let replaced = try #require(replacedFlushed.first)
        #expect(replaced.changed.map(\.user.rawValue) == ["b"])
        #expect(replaced.removed.map(\.rawValue) == ["a", "c"])
        #expect(replaced.counts == StatusCounts(offline: 1))
    }

    /// A member removed and re-added within one window is reported as changed, not removed.
    @Test func removeThenAddWithinAWindow() throws {
        var h = Harness()
        _ = h.define("g", ["a", "b"])
        _ = h.core.flushGroups(now: h.now)
        h.clock.advance(10)
        _ = h.group("g", GroupEdit(remove: ["a".id]))
        _ = h.group("g", GroupEdit(add: ["a".id]))
        h.clock.advance(40)
        let updateFlushed = h.core.flushGroups(now: h.now)
        let update = try #require(updateFlushed.first)
        #expect(update.changed.map(\.user.rawValue) == ["a"])
        #expect(update.removed.isEmpty)
    }

    /// A member of several groups updates each of them.
    @Test func memberOfSeveralGroups() {
        var h = Harness()
        _ = h.define("g1", ["a", "b"])
        _ = h.define("g2", ["a"])
        _ = h.define("g3", ["b"])
        _ = h.core.flushGroups(now: h.now)
        h.clock.advance(100)
        _ = h.open("a")
        let updates = h.core.flushGroups(now: h.now)
        #expect(Set(updates.map(\.group.rawValue)) == ["g1", "g2"])
        #expect(updates.allSatisfy { $0.counts.online == 1 && $0.changed.map(\.user.rawValue) == ["a"] })
    }

    /// Reading an unknown group answers it empty and creates nothing; deleting publishes deleted and seq keeps
    /// growing across re-creation of the same id.
    @Test func unknownDeletedAndRecreated() throws {
        var h = Harness()
        let unknown = try h.group("nope").get()
        #expect(unknown.counts.total == 0 && unknown.members.isEmpty && unknown.seq == 0)
        #expect(h.core.groupCount == 0)
        #expect(try h.group("nope", GroupEdit(remove: ["a".id])).get().seq == 0)
        #expect(h.core.groupCount == 0)
        let none = h.core.ungroup("nope".group, now: h.now)
        #expect(try none.reply.get() == false && none.actions.isEmpty)

        let first = h.define("g", ["a"])
        let deleted = h.core.ungroup("g".group, now: h.now)
        #expect(try deleted.reply.get())
        let deletion = try #require(deleted.actions.groupUpdates.first)
        #expect(deletion.deleted)
        #expect(deletion.seq > first.seq)
        #expect(h.core.groupCount == 0 && h.core.membershipCount == 0)
        #expect(h.core.flushGroups(now: h.now).isEmpty)  // the pending creation message died with the group
        #expect(h.core.groupHeader(of: "g".group, now: h.now).seq == deletion.seq)
        let again = h.define("g", ["b"])
        #expect(again.seq > deletion.seq)
        // A deleted member no longer updates the group.
        _ = h.core.flushGroups(now: h.now)
        h.clock.advance(100)
        _ = h.open("a")
        #expect(h.core.flushGroups(now: h.now).isEmpty)
    }

    /// Bad edits are refused and change nothing.
    @Test func badEditsChangeNothing() throws {
        var h = Harness {
            $0.maxGroupSize = 3
            $0.maxGroups = 2
            $0.maxMemberships = 4
        }
        _ = h.define("g", ["a", "b"])
        let before = h.core.snapshot(of: "g".group, now: h.now)
        let cases: [(GroupEdit, ErrorCode)] = [
            (GroupEdit(members: ["a".id, "a".id]), .badRequest),
            (GroupEdit(members: ["a".id], add: ["b".id]), .badRequest),
            (GroupEdit(add: ["c".id], remove: ["c".id]), .badRequest),
            (GroupEdit(add: ["c".id, "c".id]), .badRequest),
            (GroupEdit(add: ["c".id, "d".id]), .limit),
            (GroupEdit(members: ["a", "b", "c", "d"].map(\.id)), .limit),
        ]
        for (edit, code) in cases {
            #expect(h.group("g", edit).error?.code == code)
        }
        #expect(h.core.snapshot(of: "g".group, now: h.now) == before)
        _ = h.define("h", ["x", "y"])
        #expect(h.group("third", GroupEdit(members: ["z".id])).error?.code == .limit)  // too many groups
        #expect((try? h.group("third", GroupEdit(remove: ["z".id])).get())?.seq == 0)  // creates nothing: no limit
        #expect(h.group("g", GroupEdit(add: ["c".id])).error?.code == .limit)  // too many memberships
        #expect(h.core.groupCount == 2 && h.core.membershipCount == 4)
    }

    /// One list out of time: a member who expires is published, then the group message that counts her out, in
    /// that order, from a single tick.
    @Test func tickReturnsRecordsThenGroupMessagesAsOneList() throws {
        var h = Harness()
        _ = h.open("a")
        _ = h.define("g", ["a", "b"])
        _ = h.core.tick(now: h.now)  // the creation message
        h.clock.advance(3_000)  // a's TTL; the group's window has long closed
        let actions = h.core.tick(now: h.now)
        guard actions.count == 2, case .publish(let record) = actions[0], case .publishGroup(let update) = actions[1]
        else {
            Issue.record("not a record then a group message: \(actions)")
            return
        }
        #expect(record.user == "a".id && record.status == .offline && record.reason == .timeout)
        #expect(update.group == "g".group && update.counts.available == 0 && update.changed == [record])
    }
}
