import RollCallCore
import Testing

/// Blocks inside groups (docs/privacy.md): a member who blocks another member counts as offline, with the record of
/// a bye, in the group as that member receives it; the other members see the truth.
@Suite("Groups: blocks between members")
struct GroupBlockTests {
    /// The blocked member's `group` reply and group messages count the blocker offline and show its bye record; an
    /// unconcerned member's show the truth; the block itself makes the group publish, so that the blocked member
    /// learns it within a window.
    @Test func blockedMemberSeesBlockerOffline() throws {
        var h = Harness()
        _ = h.open("alice", status: .busy)
        _ = h.open("carol")
        _ = h.define("team", ["alice", "bob", "carol"])
        _ = h.core.flushGroups(now: h.now)
        h.clock.advance(1_000)
        _ = try h.core.editBlocks("alice".id, .add(["bob".id]), now: h.now).get()
        #expect(h.core.membersBlocking("bob".id, in: "team".group) == ["alice".id])
        #expect(h.core.membersBlocking("carol".id, in: "team".group).isEmpty)

        let read = try h.group("team", GroupEdit()).get()
        #expect(read.counts.available == 2)
        let bobs = h.core.groupSnapshot(read, for: "bob".id, now: h.now)
        #expect(bobs.counts.available == 1 && bobs.counts.offline == 2 && bobs.counts.total == 3)
        let hidden = try #require(bobs.members.first { $0.user == "alice".id })
        // Blocked: as on presence topics, `last_seen` and `since` are hidden too.
        #expect(hidden.status == .offline && hidden.reason == .bye && hidden.lastSeen == nil && hidden.sessions == 0)
        #expect(h.core.groupSnapshot(read, for: "carol".id, now: h.now) == read)

        let updates = h.core.flushGroups(now: h.now + 100)
        let update = try #require(updates.first)
        #expect(update.changed.map(\.user) == ["alice".id])
        #expect(update.counts.available == 2)
        let bobsUpdate = h.core.groupUpdate(update, for: "bob".id, now: h.now)
        #expect(bobsUpdate.counts.available == 1)
        #expect(bobsUpdate.changed == [hidden])
        #expect(h.core.groupUpdate(update, for: "carol".id, now: h.now) == update)
    }

    /// Unblocked, the member sees the blocker again (its current record, with a higher seq than the bye record);
    /// a blocker outside the group, or a block of a non-member, changes nothing in the group.
    @Test func unblockGivesSightBackAndOutsidersChangeNothing() throws {
        var h = Harness()
        _ = h.open("alice")
        _ = h.define("team", ["alice", "bob"])
        _ = h.core.flushGroups(now: h.now)
        _ = try h.core.editBlocks("alice".id, .add(["bob".id, "zed".id]), now: h.now).get()
        _ = try h.core.editBlocks("yan".id, .add(["bob".id]), now: h.now).get()
        #expect(h.core.membersBlocking("bob".id, in: "team".group) == ["alice".id])
        let bye = try #require(
            h.core.groupSnapshot(try h.group("team", GroupEdit()).get(), for: "bob".id, now: h.now).members.first)
        h.clock.advance(1_000)
        _ = h.core.flushGroups(now: h.now)
        _ = try h.core.editBlocks("alice".id, .remove(["bob".id]), now: h.now).get()
        #expect(h.core.membersBlocking("bob".id, in: "team".group).isEmpty)
        let update = try #require(h.core.flushGroups(now: h.now + 100).first)
        let back = try #require(update.changed.first)
        #expect(back.status == .online && back.seq > bye.seq)
        #expect(h.core.groupUpdate(update, for: "bob".id, now: h.now) == update)
        _ = try h.core.editBlocks("alice".id, .remove(["zed".id]), now: h.now + 200).get()
        #expect(h.core.flushGroups(now: h.now + 400).isEmpty)
    }
}
