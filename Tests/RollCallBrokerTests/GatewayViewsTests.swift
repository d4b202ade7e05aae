import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

@testable import RollCallBroker

/// What each WebSocket connection gets of a user with privacy settings, decided without a socket.
@Suite("WebSocket views of users with privacy settings")
struct GatewayViewsTests {
    static let bob = ConnectionID(1)
    static let zoe = ConnectionID(2)
    static let admin = ConnectionID(3)
    static let now = BrokerTime(milliseconds: 1_000_000)

    /// Alice, busy and contacts-only with bob as her contact; three connections subscribed to her topic: bob's
    /// token, a stranger's (zoe) and an operator's.
    static func world() throws -> (core: PresenceCore, table: GatewayTable, session: SessionID) {
        var core = PresenceCore()
        let session = SessionID("s1")
        _ = core.hello(.init(user: "alice".id, status: .busy, text: "x"), session: session, now: now)
        _ = try core.editContacts("alice".id, .set(["bob".id]), now: now).get()
        _ = core.setPrivacy("alice".id, visibility: .contacts, lastSeen: nil, now: now)
        var table = GatewayTableTests.table(
            (bob, .role(.user("bob".id))), (zoe, .role(.user("zoe".id))), (admin, .role(.operator)))
        for id in [bob, zoe, admin] {
            _ = table.subscribe(id, to: [.presence("alice".id)], maxTopics: 10)
        }
        return (core, table, session)
    }

    static func byConnection<T>(_ pairs: [(ConnectionID, T)]) -> [ConnectionID: T] {
        Dictionary(pairs, uniquingKeysWith: { first, _ in first })
    }

    /// A change reaches the contact and the operator as it is, and not the stranger; a last value gives the
    /// stranger the record of a bye at the moment the policy was set.
    @Test func aChangeReachesOnlyThoseWhoSeeTheUser() throws {
        var (core, table, session) = try Self.world()
        let later = Self.now + 1_000
        let changed = core.setStatus(session: session, status: .away, text: nil, now: later).updates
        let record = try #require(changed.first)
        let got = Self.byConnection(table.views(of: record, replay: false, in: core, now: later))
        #expect(got[Self.bob] == record && got[Self.admin] == record)
        #expect(got[Self.zoe] == nil && got.count == 2)

        let last = Self.byConnection(table.views(of: record, replay: true, in: core, now: later))
        let hidden = try #require(last[Self.zoe])
        #expect(hidden.status == .offline && hidden.reason == .bye && hidden.since == Self.now && hidden.text == nil)
        #expect(last[Self.bob] == core.record(of: "alice".id, now: later))
    }

    /// A contact removed gets its bye view at once; connections whose view did not change get nothing.
    @Test func aPrivacyChangeResendsOnlyChangedViews() throws {
        var (core, table, _) = try Self.world()
        let before = core.privacySnapshot(of: "alice".id, now: Self.now)
        let later = Self.now + 500
        _ = try core.editContacts("alice".id, .remove(["bob".id]), now: later).get()
        let got = table.changedViews(since: before, in: core, now: later)
        #expect(got.map(\.0) == [Self.bob])
        #expect(got.first?.1.status == .offline && got.first?.1.lastSeen == later)
        // Nobody subscribed by token: nothing to resend.
        #expect(GatewayTable().changedViews(since: before, in: core, now: later).isEmpty)
    }

    /// In a group, a member blocked by another gets its own message (the blocker offline); the others, and a
    /// connection that sees the truth, the shared one.
    @Test func aBlockedMemberGetsItsOwnGroupMessage() throws {
        var (core, table, _) = try Self.world()
        _ = core.group("team".group, GroupEdit(members: ["alice".id, "bob".id, "zoe".id]), now: Self.now)
        _ = core.editBlocks("alice".id, .add(["bob".id]), now: Self.now)
        for id in [Self.bob, Self.zoe, Self.admin] {
            _ = table.subscribe(id, to: [.group("team".group)], maxTopics: 10, isMember: { _, _ in true })
        }
        let alice = core.record(of: "alice".id, now: Self.now)
        let update = GroupUpdate(
            group: "team".group, counts: StatusCounts(busy: 1, offline: 2), changed: [alice], removed: [], seq: 9)
        let got = Self.byConnection(table.views(of: update, in: core, now: Self.now))
        #expect(got.count == 3)
        #expect(got[Self.zoe] == .some(nil) && got[Self.admin] == .some(nil))
        let own = try #require(got[Self.bob] ?? nil)
        #expect(own.changed.first?.status == .offline && own.counts.busy == 0)
    }

    /// A resume leaves out a hidden user's transitions and gives that user's view instead; a visible user's go
    /// out as they were, and a connection without a viewer gets everything.
    @Test func aResumeShowsAHiddenUsersViewInstead() throws {
        let (core, table, _) = try Self.world()
        let record = core.record(of: "alice".id, now: Self.now)
        #expect(table.resumed(record, to: Self.zoe, in: core) == nil)
        #expect(table.resumed(record, to: Self.bob, in: core) == record)
        #expect(table.resumed(record, to: Self.admin, in: core) == record)
        let views = table.hiddenViews(of: [.presence("alice".id), .broker], to: Self.zoe, in: core, now: Self.now)
        #expect(views == [core.view(of: "alice".id, for: "zoe".id, now: Self.now)])
        #expect(table.hiddenViews(of: [.presence("alice".id)], to: Self.bob, in: core, now: Self.now).isEmpty)
    }

    /// A member taken out of a group gets the message that takes it out and nothing after it, though its subscription
    /// stays; without blocks, the members get the shared message.
    @Test func aMemberTakenOutGetsNothingMore() throws {
        var (core, table, _) = try Self.world()
        let team = "team".group
        _ = core.group(team, GroupEdit(members: ["alice".id, "bob".id, "zoe".id]), now: Self.now)
        for id in [Self.bob, Self.zoe, Self.admin] {
            _ = table.subscribe(id, to: [.group(team)], maxTopics: 10, isMember: { _, _ in true })
        }
        _ = core.group(team, GroupEdit(members: ["alice".id, "bob".id]), now: Self.now)
        let header = core.groupHeader(of: team, now: Self.now)
        let out = GroupUpdate(group: team, counts: header.counts, changed: [], removed: ["zoe".id], seq: header.seq)
        let toAll = Self.byConnection(table.views(of: out, in: core, now: Self.now))
        #expect(toAll.count == 3 && toAll.values.allSatisfy { $0 == nil })
        let after = Self.byConnection(table.views(of: header, in: core, now: Self.now))
        #expect(Set(after.keys) == [Self.bob, Self.admin] && after.values.allSatisfy { $0 == nil })
    }
}
