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
        viewers.subscribed(to: alice, by: "bob".id)
        viewers.subscribed(to: alice, by: "zoe".id)
        viewers.subscribed(to: alice, by: nil)  // the operator's
        return (core, viewers, session)
    }

    /// A user without settings goes once for everyone while user keys follow it, and costs no copies; with settings,
    /// a change is copied to the viewers that see her, and a last value gives each its own view.
    @Test func copiesOnlyForAUserWithSettings() throws {
        var (core, viewers, session) = try Self.world(contactsOnly: false)
        #expect(viewers.publishesForEveryone(Self.alice, in: core))
        #expect(!viewers.publishesForEveryone("bob".id, in: core))  // followed by nobody: the truth topic
        let open = core.record(of: Self.alice, now: Self.now)
        #expect(viewers.copies(of: open, replay: false, in: core, now: Self.now).isEmpty)

        (core, viewers, session) = try Self.world(contactsOnly: true)
        #expect(!viewers.publishesForEveryone(Self.alice, in: core))
        let later = Self.now + 1_000
        let record = try #require(core.setStatus(session: session, status: .away, text: nil, now: later).updates.first)
        let copies = viewers.copies(of: record, replay: false, in: core, now: later)
        #expect(copies.map(\.0) == ["bob".id] && copies.first?.1 == record)

        let last = Dictionary(uniqueKeysWithValues: viewers.copies(of: record, replay: true, in: core, now: later))
        #expect(last["bob".id] == core.record(of: Self.alice, now: later))
        let hidden = try #require(last["zoe".id])
        #expect(hidden.status == .offline && hidden.reason == .bye && hidden.since == Self.now && hidden.text == nil)
    }

    /// A privacy change sends the viewers whose view changed their new view: the stranger its bye when alice hides,
    /// the removed contact its bye, and the current record when sight comes back.
    @Test func aPrivacyChangeSendsChangedViews() throws {
        var (core, viewers, _) = try Self.world(contactsOnly: false)
        var before = core.privacySnapshot(of: Self.alice, now: Self.now)
        _ = try core.editContacts(Self.alice, .set(["bob".id]), now: Self.now).get()
        _ = core.setPrivacy(Self.alice, visibility: .contacts, lastSeen: nil, now: Self.now)
        var changed = viewers.changedViews(since: before, in: core, now: Self.now)
        #expect(changed.map(\.0) == ["zoe".id] && changed.first?.1.status == .offline)
        let bye = try #require(changed.first?.1)

        let later = Self.now + 500
        before = core.privacySnapshot(of: Self.alice, now: later)
        _ = core.setPrivacy(Self.alice, visibility: .everyone, lastSeen: nil, now: later)
        changed = viewers.changedViews(since: before, in: core, now: later)
        #expect(changed.map(\.0) == ["zoe".id] && changed.first?.1.status == .busy)
        #expect(try #require(changed.first?.1.seq) > bye.seq)
    }

    /// A viewer's own unsubscriptions take it off; libzmq's unsubscriptions for subscribers that left take the
    /// viewers off only once no subscription of any key is left, however many of them were the viewers'.
    @Test func viewersStayUntilNoSubscriptionIsLeft() throws {
        var (core, viewers, _) = try Self.world(contactsOnly: true)
        viewers.subscribed(to: Self.alice, by: "bob".id)  // bob's second connection
        viewers.unsubscribed("bob".id, from: Self.alice)
        #expect(viewers.viewers(of: Self.alice).map(Set.init) == ["bob".id, "zoe".id])
        viewers.unsubscribed("zoe".id, from: Self.alice)
        viewers.unsubscribed("zoe".id, from: Self.alice)  // one too many: changes nothing
        #expect(viewers.viewers(of: Self.alice).map(Set.init) == ["bob".id])

        // Four subscriptions were read; three subscribers leave (they may have been anyone's), then the last.
        for _ in 0..<3 { viewers.subscriberLeft(Self.alice) }
        #expect(viewers.viewers(of: Self.alice).map(Set.init) == ["bob".id])
        viewers.subscriberLeft(Self.alice)
        #expect(viewers.viewers(of: Self.alice) == nil && viewers.isEmpty)
        viewers.subscriberLeft(Self.alice)  // nothing left to count down
        #expect(viewers.isEmpty)
        _ = core
    }

    /// A viewer whose subscriptions are not counted (past the limit of users counted) stays for good: never fewer
    /// viewers than follow.
    @Test func pastTheLimitViewersAreKept() {
        var viewers = UpdateViewers(limit: 1)
        viewers.subscribed(to: "bob".id, by: nil)
        viewers.subscribed(to: Self.alice, by: "zoe".id)
        viewers.subscriberLeft(Self.alice)
        #expect(viewers.viewers(of: Self.alice).map(Set.init) == ["zoe".id])
    }
}
