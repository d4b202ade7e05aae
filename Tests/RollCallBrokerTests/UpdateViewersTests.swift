import RollCallCore
import RollCallWire
import Testing

@testable import RollCallBroker

/// Who follows whom on the update socket with a `user` key, and what each gets, decided without a socket.
@Suite("Update socket viewers")
struct UpdateViewersTests {
    static let now = BrokerTime(milliseconds: 1_000_000)
    static let alice = "alice".id

    /// Alice, busy, with bob and zoe following her by `user` key and an operator by its own; with `contactsOnly`,
    /// her contact is bob.
    static func world(contactsOnly: Bool) throws -> (core: PresenceCore, viewers: UpdateViewers, session: SessionID) {
        var core = PresenceCore()
        let session = SessionID("s1")
        _ = core.hello(.init(user: alice, status: .busy, text: "x"), session: session, now: now)
        if contactsOnly {
            _ = try core.editContacts(alice, .set(["bob".id]), now: now).get()
            _ = core.setPrivacy(alice, visibility: .contacts, lastSeen: nil, now: now)
        }
        var viewers = UpdateViewers()
        viewers.subscribed(to: .presence(alice), by: "bob".id)
        viewers.subscribed(to: .presence(alice), by: "zoe".id)
        viewers.subscribed(to: .presence(alice), by: nil)  // the operator's
        return (core, viewers, session)
    }

    /// A user without settings goes once for everyone while user keys follow it; with settings, a change goes once
    /// for everyone while every viewer sees it whole, else to each viewer that sees her, as it may; a last value gives
    /// each viewer its own view. Nobody following: the truth topic.
    @Test func onceForEveryoneUnlessAViewerMayNotSeeAll() throws {
        var (core, viewers, session) = try Self.world(contactsOnly: false)
        let open = core.record(of: Self.alice, now: Self.now)
        #expect(viewers.delivery(of: open, replay: false, in: core, now: Self.now) == .forEveryone)
        let bob = core.record(of: "bob".id, now: Self.now)
        #expect(viewers.delivery(of: bob, replay: false, in: core, now: Self.now) == .truth)

        (core, viewers, session) = try Self.world(contactsOnly: true)
        let later = Self.now + 1_000
        let record = try #require(core.setStatus(session: session, status: .away, text: nil, now: later).updates.first)
        #expect(
            viewers.delivery(of: record, replay: false, in: core, now: later)
                == .copies([.init(viewer: "bob".id, message: record)]))
        guard case .copies(let last) = viewers.delivery(of: record, replay: true, in: core, now: later) else {
            Issue.record("a last value for a viewer that may not see her goes as copies")
            return
        }
        #expect(last.map(\.viewer) == ["bob".id, "zoe".id])
        #expect(last.first?.message == core.record(of: Self.alice, now: later))
        let hidden = try #require(last.last?.message)
        #expect(hidden.status == .offline && hidden.reason == .bye && hidden.since == Self.now && hidden.text == nil)

        // Followed by her contact alone (zoe's key never subscribed): once for everyone again.
        var contactOnly = UpdateViewers()
        contactOnly.subscribed(to: .presence(Self.alice), by: "bob".id)
        #expect(contactOnly.delivery(of: record, replay: false, in: core, now: later) == .forEveryone)
    }

    /// A privacy change sends the viewers whose view changed their new view: the stranger its bye when alice hides,
    /// the removed contact its bye, and the current record when sight comes back.
    @Test func aPrivacyChangeSendsChangedViews() throws {
        var (core, viewers, _) = try Self.world(contactsOnly: false)
        var before = core.privacySnapshot(of: Self.alice, now: Self.now)
        _ = try core.editContacts(Self.alice, .set(["bob".id]), now: Self.now).get()
        _ = core.setPrivacy(Self.alice, visibility: .contacts, lastSeen: nil, now: Self.now)
        var changed = viewers.changedViews(since: before, in: core, now: Self.now)
        #expect(changed.map(\.viewer) == ["zoe".id] && changed.first?.message.status == .offline)
        let bye = try #require(changed.first?.message)

        let later = Self.now + 500
        before = core.privacySnapshot(of: Self.alice, now: later)
        _ = core.setPrivacy(Self.alice, visibility: .everyone, lastSeen: nil, now: later)
        changed = viewers.changedViews(since: before, in: core, now: later)
        #expect(changed.map(\.viewer) == ["zoe".id] && changed.first?.message.status == .busy)
        #expect(try #require(changed.first?.message.seq) > bye.seq)
    }

    /// Viewers stay listed through their own unsubscriptions (libzmq passes them for topics not held too), and go
    /// once libzmq's unsubscriptions for subscribers that left have counted down every subscription read, whoever
    /// made it.
    @Test func viewersStayUntilNoSubscriptionIsLeft() throws {
        var (_, viewers, _) = try Self.world(contactsOnly: true)
        viewers.subscribed(to: .presence(Self.alice), by: "bob".id)  // bob's second connection
        // Four subscriptions were read; three subscribers leave (they may have been anyone's), then the last.
        for _ in 0..<3 { viewers.subscriberLeft(.presence(Self.alice)) }
        #expect(viewers.viewers(of: .presence(Self.alice)) == ["bob".id, "zoe".id])
        viewers.subscriberLeft(.presence(Self.alice))
        #expect(viewers.viewers(of: .presence(Self.alice)) == nil && viewers.isEmpty)
        viewers.subscriberLeft(.presence(Self.alice))  // nothing left to count down
        #expect(viewers.isEmpty)
    }

    /// Past the limit of topics counted, no viewer is forgotten any more: a topic counted anew after another's
    /// count ran out would count down without the subscriptions it missed (zoe's connection holds alice's forms,
    /// uncounted, while carol's subscription, counted, leaves).
    @Test func pastTheLimitViewersAreKept() {
        var viewers = UpdateViewers(limit: 1)
        viewers.subscribed(to: .presence("bob".id), by: nil)
        viewers.subscribed(to: .presence(Self.alice), by: "zoe".id)  // uncounted
        #expect(viewers.overflowed)
        viewers.subscriberLeft(.presence(Self.alice))
        viewers.subscriberLeft(.presence("bob".id))
        viewers.subscribed(to: .presence(Self.alice), by: "carol".id)
        viewers.subscriberLeft(.presence(Self.alice))
        #expect(viewers.viewers(of: .presence(Self.alice)) == ["zoe".id, "carol".id])
    }

    /// A group goes once for everyone while every viewer following it is a member that no member blocks; else each
    /// member its own message (a blocker offline for the blocked one), and a viewer taken out of the group nothing
    /// after the message that takes it out.
    @Test func groupMessagesGoToMembersAsTheyMaySeeThem() throws {
        var (core, _, _) = try Self.world(contactsOnly: false)
        let team = "team".group
        _ = core.group(team, GroupEdit(members: [Self.alice, "bob".id, "zoe".id]), now: Self.now)
        var viewers = UpdateViewers()
        viewers.subscribed(to: .group(team), by: "bob".id)
        viewers.subscribed(to: .group(team), by: "zoe".id)
        let header = core.groupHeader(of: team, now: Self.now)
        #expect(viewers.delivery(of: header, in: core, now: Self.now) == .forEveryone)

        _ = core.editBlocks(Self.alice, .add(["bob".id]), now: Self.now)
        let blocked = core.groupHeader(of: team, now: Self.now)
        guard case .copies(let copies) = viewers.delivery(of: blocked, in: core, now: Self.now) else {
            Issue.record("a member that a member blocks gets its own message")
            return
        }
        #expect(copies.map(\.viewer) == ["bob".id, "zoe".id])
        #expect(copies.last?.message == blocked)
        #expect(copies.first?.message.counts.offline == blocked.counts.offline + 1)

        _ = core.editBlocks(Self.alice, .remove(["bob".id]), now: Self.now)
        _ = core.group(team, GroupEdit(members: [Self.alice, "bob".id]), now: Self.now)
        let after = core.groupHeader(of: team, now: Self.now)
        let out = GroupUpdate(group: team, counts: after.counts, changed: [], removed: ["zoe".id], seq: after.seq)
        #expect(
            viewers.delivery(of: after, in: core, now: Self.now) == .copies([.init(viewer: "bob".id, message: after)]))
        #expect(viewers.delivery(of: out, in: core, now: Self.now) == .forEveryone, "the message that takes zoe out")
    }
}
