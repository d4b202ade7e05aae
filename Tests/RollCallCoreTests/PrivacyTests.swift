import RollCallCore
import Testing

@Suite("Privacy")
struct PrivacyTests {
    /// Under `contacts`, a contact sees the live record and a stranger the record of a bye at the moment the policy
    /// was set, frozen while the user keeps changing.
    @Test func contactsOnlySeenByContactNotByStranger() throws {
        var h = Harness()
        let alice = h.open("alice", status: .busy, text: "meeting")
        h.clock.advance(1_000)
        _ = try h.core.editContacts("alice".id, .set(["bob".id]), now: h.now).get()
        let hiddenAt = h.now
        _ = h.core.setPrivacy("alice".id, visibility: .contacts, lastSeen: nil, now: h.now)
        let truth = h.record("alice")
        #expect(h.core.view(of: "alice".id, for: "bob".id, now: h.now) == truth)
        let stranger = h.core.view(of: "alice".id, for: "zoe".id, now: h.now)
        #expect(stranger.status == .offline && stranger.reason == .bye && stranger.sessions == 0)
        #expect(stranger.text == nil && stranger.lastSeen == hiddenAt && stranger.since == hiddenAt)
        h.clock.advance(1_000)
        let changed = h.core.setStatus(session: alice, status: .away, text: nil, now: h.now).updates
        #expect(changed.count == 1)
        #expect(h.core.deliverable(changed[0], to: "zoe".id) == nil)
        #expect(h.core.deliverable(changed[0], to: "bob".id) == changed[0])
        #expect(h.core.view(of: "alice".id, for: "zoe".id, now: h.now) == stranger)
    }

    /// A contact removed gets exactly the record a bye would have published at that moment (seq included), nothing
    /// while the user changes, and the current record, with a higher seq, once added back.
    @Test func removedContactGetsByeThenNothingThenCurrent() throws {
        var h = Harness()
        let alice = h.open("alice")
        _ = try h.core.editContacts("alice".id, .set(["bob".id]), now: h.now).get()
        _ = h.core.setPrivacy("alice".id, visibility: .contacts, lastSeen: nil, now: h.now)
        h.clock.advance(700)
        var byeWorld = h.core
        let bye = byeWorld.bye(session: alice, now: h.now).updates
        let before = h.core.view(of: "alice".id, for: "bob".id, now: h.now)
        _ = try h.core.editContacts("alice".id, .remove(["bob".id]), now: h.now).get()
        let hidden = h.core.view(of: "alice".id, for: "bob".id, now: h.now)
        #expect(bye.count == 1 && hidden == bye[0])
        #expect(hidden.seq > before.seq)
        for status in [Status.busy, .away, .online] {
            h.clock.advance(100)
            for record in h.core.setStatus(session: alice, status: status, text: nil, now: h.now).updates {
                #expect(h.core.deliverable(record, to: "bob".id) == nil)
            }
            #expect(h.core.view(of: "alice".id, for: "bob".id, now: h.now) == hidden)
        }
        _ = try h.core.editContacts("alice".id, .add(["bob".id]), now: h.now).get()
        let back = h.core.view(of: "alice".id, for: "bob".id, now: h.now)
        #expect(back.status == .online && back.sessions == 1 && back.seq > hidden.seq)
        #expect(back == h.record("alice"))
    }

    /// A block hides the user from a contact, whatever the policy; unblocked, the contact sees again.
    @Test func blockOverridesContact() throws {
        var h = Harness()
        _ = h.open("alice")
        _ = try h.core.editContacts("alice".id, .set(["bob".id]), now: h.now).get()
        _ = h.core.setPrivacy("alice".id, visibility: .contacts, lastSeen: nil, now: h.now)
        _ = try h.core.editBlocks("alice".id, .add(["bob".id]), now: h.now).get()
        #expect(h.core.sight(of: "alice".id, by: "bob".id) == Sight(status: false, lastSeen: false))
        let blocked = h.core.view(of: "alice".id, for: "bob".id, now: h.now)
        #expect(blocked.status == .offline && blocked.lastSeen == nil && blocked.since == nil)
        _ = h.core.setPrivacy("alice".id, visibility: .everyone, lastSeen: .everyone, now: h.now)
        #expect(h.core.view(of: "alice".id, for: "bob".id, now: h.now).status == .offline)
        _ = try h.core.editBlocks("alice".id, .remove(["bob".id]), now: h.now).get()
        #expect(h.core.view(of: "alice".id, for: "bob".id, now: h.now).status == .online)
    }

    /// `last_seen` hidden while the status shows: an offline user's `last_seen` and `since` are null; and the
    /// reverse: hidden status, with the frozen `last_seen` shown.
    @Test func lastSeenAndStatusAreSeparate() throws {
        var h = Harness()
        let alice = h.open("alice")
        h.clock.advance(500)
        _ = h.core.bye(session: alice, now: h.now)
        _ = h.core.setPrivacy("alice".id, visibility: .everyone, lastSeen: .nobody, now: h.now)
        let seen = h.core.view(of: "alice".id, for: "bob".id, now: h.now)
        #expect(seen.status == .offline && seen.reason == .bye && seen.lastSeen == nil && seen.since == nil)
        #expect(h.core.view(of: "alice".id, for: "alice".id, now: h.now).lastSeen != nil)
        _ = h.open("alice", status: .away)
        let away = h.core.view(of: "alice".id, for: "bob".id, now: h.now)
        #expect(away.status == .away && away.lastSeen == h.now)

        let wentAt = h.now
        _ = h.core.setPrivacy("alice".id, visibility: .nobody, lastSeen: .everyone, now: h.now)
        h.clock.advance(900)
        let hidden = h.core.view(of: "alice".id, for: "bob".id, now: h.now)
        #expect(hidden.status == .offline && hidden.lastSeen == wentAt && hidden.since == wentAt)
    }

    /// Refused edits change nothing: no settings, no seq.
    @Test func refusedEditsChangeNothing() throws {
        var h = Harness { $0.maxContacts = 2 }
        _ = h.open("alice")
        let seq = h.record("alice").seq
        let three = ["b".id, "c".id, "d".id]
        #expect(h.core.editContacts("alice".id, .set(three), now: h.now).error?.code == .limit)
        _ = try h.core.editContacts("alice".id, .set(["b".id, "c".id]), now: h.now).get()
        let settings = h.core.settings(of: "alice".id)
        let seqAfter = h.record("alice").seq
        #expect(seqAfter > seq)
        #expect(h.core.editContacts("alice".id, .add(["d".id]), now: h.now).error?.code == .limit)
        #expect(h.core.editContacts("alice".id, .add(["d".id, "d".id]), now: h.now).error?.code == .badRequest)
        #expect(h.core.editContacts("alice".id, .add(["alice".id]), now: h.now).error?.code == .badRequest)
        #expect(h.core.editBlocks("alice".id, .set(["d".id]), now: h.now).error?.code == .badRequest)
        #expect(h.core.settings(of: "alice".id) == settings)
        #expect(h.record("alice").seq == seqAfter)
        #expect(try h.core.editContacts("alice".id, .add(["b".id]), now: h.now).get() == 2)
        #expect(h.record("alice").seq == seqAfter)
    }

    /// A policy set before the user was ever seen keeps the user, for strangers, exactly a user never seen.
    @Test func hiddenBeforeFirstHelloStaysUnknown() {
        var h = Harness()
        _ = h.core.setPrivacy("ghost".id, visibility: .nobody, lastSeen: .nobody, now: h.now)
        _ = h.open("ghost", status: .busy, text: "hi")
        #expect(h.core.view(of: "ghost".id, for: "bob".id, now: h.now) == .unknown("ghost".id))
        #expect(h.core.view(of: "ghost".id, for: "ghost".id, now: h.now).status == .busy)
    }

    /// The broker heartbeat goes to every subscriber alike, so its counts leave out users hidden from some viewer:
    /// a contacts-only user coming online moves no count, a block takes the blocker out, and both come back.
    @Test func heartbeatCountsLeaveOutHiddenUsers() throws {
        var h = Harness()
        _ = h.open("bob")
        #expect(h.core.publicCounts == (1, 1))
        _ = h.core.setPrivacy("alice".id, visibility: .contacts, lastSeen: nil, now: h.now)
        let alice = h.open("alice")
        _ = h.open("alice")
        #expect(h.core.availableUserCount == 2 && h.core.visibleSessionCount == 3)
        #expect(h.core.publicCounts == (1, 1))
        _ = try h.core.editBlocks("bob".id, .add(["zoe".id]), now: h.now).get()
        #expect(h.core.publicCounts == (0, 0))
        _ = h.core.bye(session: alice, now: h.now)
        _ = h.core.setPrivacy("alice".id, visibility: .everyone, lastSeen: nil, now: h.now)
        #expect(h.core.publicCounts == (1, 1))
        _ = try h.core.editBlocks("bob".id, .remove(["zoe".id]), now: h.now).get()
        #expect(h.core.publicCounts == (2, 2))
        // Kept and restored: the counts are rebuilt with the settings.
        _ = h.core.setPrivacy("alice".id, visibility: .nobody, lastSeen: nil, now: h.now)
        var restarted = PresenceCore()
        restarted.restore(records: h.core.everything(now: h.now).records, groups: [], now: h.now)
        restarted.restorePrivacy(h.core.allPrivacySettings())
        #expect(restarted.availableUserCount == 2)
        #expect(restarted.publicCounts == (1, 1))
    }

    /// Settings kept and brought back after a restart give the same views, with seqs above the previous run's.
    @Test func settingsSurviveARestart() throws {
        var h = Harness()
        let alice = h.open("alice")
        _ = try h.core.editContacts("alice".id, .set(["bob".id, "carol".id]), now: h.now).get()
        _ = h.core.setPrivacy("alice".id, visibility: .contacts, lastSeen: .contacts, now: h.now)
        h.clock.advance(10)
        _ = try h.core.editContacts("alice".id, .remove(["carol".id]), now: h.now).get()
        _ = try h.core.editBlocks("alice".id, .add(["dan".id]), now: h.now).get()
        _ = h.core.bye(session: alice, now: h.now)
        let viewers = ["bob", "carol", "dan", "zoe"].map(\.id)
        let views = viewers.map { h.core.view(of: "alice".id, for: $0, now: h.now) }
        let kept = h.core.everything(now: h.now)
        let privacy = h.core.allPrivacySettings()
        h.clock.advance(5_000)
        var restarted = PresenceCore()
        restarted.restore(records: kept.records, groups: [], now: h.now)
        restarted.restorePrivacy(privacy)
        #expect(restarted.allPrivacySettings() == privacy)
        for (viewer, old) in zip(viewers, views) {
            var new = restarted.view(of: "alice".id, for: viewer, now: h.now)
            #expect(new.seq > old.seq)
            new.seq = old.seq
            #expect(new == old)
        }
    }

    /// The property: over random policies, contacts, blocks and status changes, every viewer receives about every
    /// user what it would have received had that user said bye at each moment of hiding (exactly, seq included),
    /// then nothing until sight comes back, then the current record; every record it receives has a seq above
    /// the ones before, and a read (`view`) always agrees with what it last received.
    @Test func hiddenEqualsBye() {
        var byes = 0
        var received = 0
        for seed in UInt64(0)..<100 {
            var world = RandomWorld(seed: seed)
            for _ in 0..<100 { world.step() }
            #expect(world.failures == [], "seed \(seed): \(world.trace.joined(separator: "\n"))")
            byes += world.exactSeq.values.reduce(0) { $0 + $1.count }
            received += world.received.values.reduce(0) { $0 + $1.count }
        }
        // The runs must hide users from viewers often enough for the property to say something.
        print("hiddenEqualsBye: \(received) records received, \(byes) of them bye records checked seq included")
        #expect(byes > 100)
    }
}

/// A core driven at random, with what every viewer receives (as the broker delivers it) beside what a reference
/// model says it should receive.
struct RandomWorld {
    var rng: SplitMix
    var h = Harness()
    let names = ["a", "b", "c", "d"].map(\.id)
    var session: [UserID: SessionID] = [:]
    // The reference rules, kept by the test itself.
    var visibility: [UserID: Audience] = [:]
    var lastSeen: [UserID: Audience] = [:]
    var contacts: [UserID: Set<UserID>] = [:]
    var blocks: [UserID: Set<UserID>] = [:]
    struct Pair: Hashable {
        var viewer: UserID
        var user: UserID
    }
    var received: [Pair: [PresenceRecord]] = [:]
    /// The last record the reference expects the viewer to hold, unmasked, and what it expects as received.
    var expectedTruth: [Pair: PresenceRecord] = [:]
    var expected: [Pair: [PresenceRecord]] = [:]
    /// Which received records must match the expected ones seq included (those a bye would have published).
    var exactSeq: [Pair: Set<Int>] = [:]
    var failures: [String] = []
    /// What happened, for the message of a failing seed.
    var trace: [String] = []

    init(seed: UInt64) { rng = SplitMix(seed: seed) }

    var pairs: [Pair] { names.flatMap { v in names.filter { $0 != v }.map { Pair(viewer: v, user: $0) } } }

    func refSight(_ pair: Pair) -> Sight {
        if blocks[pair.user, default: []].contains(pair.viewer) { return Sight(status: false, lastSeen: false) }
        func allows(_ audience: Audience?) -> Bool {
            switch audience ?? .everyone {
            case .everyone: true
            case .contacts: contacts[pair.user, default: []].contains(pair.viewer)
            case .nobody: false
            }
        }
        return Sight(status: allows(visibility[pair.user]), lastSeen: allows(lastSeen[pair.user]))
    }

    func masked(_ record: PresenceRecord, _ sight: Sight) -> PresenceRecord {
        guard !sight.lastSeen, !record.status.isAvailable else { return record }
        var record = record
        record.since = nil
        record.lastSeen = nil
        return record
    }

    func sameContent(_ a: PresenceRecord, _ b: PresenceRecord) -> Bool {
        var a = a
        a.seq = b.seq
        if a.status.isAvailable && b.status.isAvailable { a.lastSeen = b.lastSeen }
        return a == b
    }

    mutating func expect(_ pair: Pair, _ truth: PresenceRecord, _ sight: Sight, exact: Bool = false) {
        let record = masked(truth, sight)
        let last = expected[pair]?.last ?? .unknown(pair.user)
        expectedTruth[pair] = truth
        guard !sameContent(record, last) || exact && record.seq != last.seq else { return }
        if exact { exactSeq[pair, default: []].insert(expected[pair, default: []].count) }
        expected[pair, default: []].append(record)
    }

    mutating func deliver(_ records: [PresenceRecord]) {
        for record in records {
            for viewer in names where viewer != record.user {
                if let delivered = h.core.deliverable(record, to: viewer) {
                    received[Pair(viewer: viewer, user: record.user), default: []].append(delivered)
                }
            }
        }
    }

    mutating func step() {
        guard failures.isEmpty else { return }
        h.clock.advance(Int64(rng.next(3)))
        let user = names[rng.next(names.count)]
        let others = names.filter { $0 != user }
        let statuses: [Status] = [.online, .busy, .away, .offline, .invisible]
        let kind = rng.next(6)
        let sightsBefore = Dictionary(uniqueKeysWithValues: pairs.map { ($0, refSight($0)) })
        let viewsBefore = Dictionary(
            uniqueKeysWithValues: pairs.map { ($0, h.core.view(of: $0.user, for: $0.viewer, now: h.now)) })
        let beforeCore = h.core
        switch kind {
        case 0, 1, 2:
            let status = statuses[rng.next(statuses.count)]
            let text = rng.next(2) == 0 ? nil : "t\(rng.next(3))"
            let updates: [PresenceRecord]
            if let id = session[user] {
                if kind == 2 {
                    updates = h.core.bye(session: id, now: h.now).updates
                    session[user] = nil
                } else {
                    updates = h.core.setStatus(session: id, status: status, text: text, now: h.now).updates
                }
            } else {
                h.nextSession += 1
                let id = SessionID("s\(h.nextSession)")
                updates = h.core.hello(.init(user: user, status: status, text: text), session: id, now: h.now).updates
                session[user] = id
            }
            trace.append("\(h.now) \(user) session \(kind) \(status): \(updates.map(\.status))")
            deliver(updates)
            for record in updates {
                for pair in pairs where pair.user == record.user && refSight(pair).status {
                    expect(pair, record, refSight(pair))
                }
            }
            check()
            return
        case 3:
            let v = rng.next(2) == 0 ? nil : Audience.allCases[rng.next(3)]
            let l = rng.next(2) == 0 ? nil : Audience.allCases[rng.next(3)]
            _ = h.core.setPrivacy(user, visibility: v, lastSeen: l, now: h.now)
            trace.append("\(h.now) \(user) privacy \(String(describing: v)) \(String(describing: l))")
            if let v { visibility[user] = v }
            if let l { lastSeen[user] = l }
        case 4:
            let subset = others.filter { _ in rng.next(2) == 0 }
            let verb = rng.next(3)
            let edit: ListEdit = verb == 0 ? .set(subset) : verb == 1 ? .add(subset) : .remove(subset)
            _ = try! h.core.editContacts(user, edit, now: h.now).get()
            trace.append("\(h.now) \(user) contacts \(edit)")
            let old = contacts[user, default: []]
            contacts[user] = verb == 0 ? Set(subset) : verb == 1 ? old.union(subset) : old.subtracting(subset)
        default:
            let subset = others.filter { _ in rng.next(3) == 0 }
            let add = rng.next(2) == 0
            _ = try! h.core.editBlocks(user, add ? .add(subset) : .remove(subset), now: h.now).get()
            trace.append("\(h.now) \(user) blocks add \(add) \(subset)")
            let old = blocks[user, default: []]
            blocks[user] = add ? old.union(subset) : old.subtracting(subset)
        }
        // A privacy change: the broker sends each subscriber whose view changed the new view.
        for pair in pairs where pair.user == user {
            let after = h.core.view(of: pair.user, for: pair.viewer, now: h.now)
            if !sameContent(after, viewsBefore[pair]!) { received[pair, default: []].append(after) }
            let was = sightsBefore[pair]!
            let now = refSight(pair)
            if was.status && !now.status {
                // Hidden now: what a bye of the user's session at this moment would have published, if anything.
                var byeWorld = beforeCore
                if let id = session[user], let bye = byeWorld.bye(session: id, now: h.now).updates.last {
                    expect(pair, bye, now, exact: true)
                } else {
                    expect(pair, expectedTruth[pair] ?? .unknown(user), now)
                }
            } else if now.status {
                expect(pair, h.core.record(of: user, now: h.now), now)
            } else {
                expect(pair, expectedTruth[pair] ?? .unknown(user), now)
            }
        }
        check()
    }

    mutating func check() {
        for pair in pairs where failures.isEmpty {
            let got = received[pair] ?? []
            let want = expected[pair] ?? []
            guard got.count == want.count else {
                failures.append("\(pair): received \(got) expected \(want)")
                continue
            }
            for (index, (g, w)) in zip(got, want).enumerated() {
                let exact = exactSeq[pair, default: []].contains(index)
                if exact ? g != w : !sameContent(g, w) { failures.append("\(pair) #\(index): \(g) vs \(w)") }
            }
            for (a, b) in zip(got, got.dropFirst()) where b.seq <= a.seq {
                failures.append("\(pair): seq \(b.seq) after \(a.seq)")
            }
            let read = h.core.view(of: pair.user, for: pair.viewer, now: h.now)
            let last = got.last ?? .unknown(pair.user)
            if !sameContent(read, last) || read.seq < last.seq {
                failures.append("\(pair): read \(read) but last received \(last)")
            }
        }
        // The broker heartbeat's counts, kept as changes come, equal a count of the users every viewer may see.
        let open = names.filter { (visibility[$0] ?? .everyone) == .everyone && blocks[$0, default: []].isEmpty }
        let records = open.map { h.core.record(of: $0, now: h.now) }
        let counts = h.core.publicCounts
        let want = (records.filter(\.status.isAvailable).count, records.reduce(0) { $0 + $1.sessions })
        if failures.isEmpty, counts != want { failures.append("public counts \(counts), from the records \(want)") }
    }
}

/// A small seeded generator, so that a failing seed can be run again.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next(_ bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        return Int(z % UInt64(bound))
    }
}
