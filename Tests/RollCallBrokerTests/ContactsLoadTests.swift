import RollCallCore
import RollCallWire
import Testing

@testable import RollCallBroker

/// A contacts file applied by the machine (`--contacts-file`, docs/privacy.md): what op `contacts` with `set` does,
/// for every user the file lists, all or nothing.
@Suite("Broker machine: contacts file")
struct ContactsLoadTests {
    static func lists(_ text: String, maxContacts: Int = 5_000) throws -> [ContactList] {
        try ContactsFile.parse(Array(text.utf8), maxContacts: maxContacts).get()
    }

    /// The users whose views the effects ask the loop to send again.
    static func resent(_ effects: [BrokerMachine.Effect]) -> [UserID] {
        effects.compactMap { if case .resendViews(let before) = $0 { before.user } else { nil } }
    }

    /// A load sets the contacts of the users it lists and leaves the others' alone; each changed user asks for its
    /// subscribers' views once; loading the same file again changes nothing and asks for nothing.
    @Test func setsListedUsersKeepsOthers() throws {
        var broker = Scripted()
        _ = try broker.hello("alice")
        _ = broker.request(.contacts(user: "zed".id, .set(["yan".id])))
        _ = broker.effects()
        let file = try Self.lists("alice: bob, carol\nbob: alice\n")
        #expect(broker.machine.loadContacts(file, now: broker.now) == .success(2))
        #expect(Self.resent(broker.effects()) == ["alice".id, "bob".id])
        #expect(broker.machine.core.contacts(of: "alice".id) == ["bob".id, "carol".id])
        #expect(broker.machine.core.contacts(of: "bob".id) == ["alice".id])
        #expect(broker.machine.core.contacts(of: "zed".id) == ["yan".id])

        #expect(broker.machine.loadContacts(file, now: broker.now) == .success(0))
        #expect(broker.effects().isEmpty)
        #expect(broker.machine.loadContacts(try Self.lists("alice:\n"), now: broker.now) == .success(1))
        #expect(broker.machine.core.contacts(of: "alice".id).isEmpty)
        #expect(broker.machine.core.contacts(of: "bob".id) == ["alice".id])
    }

    /// A contact the file drops loses sight of a contacts-only user: its view becomes the record of a bye at that
    /// moment, and the snapshot taken before shows it saw the user, so the loop sends the bye record at once.
    @Test func removedContactLosesSight() throws {
        var broker = Scripted()
        let session = try broker.hello("alice", status: .busy)
        _ = broker.request(.privacy(user: "alice".id, visibility: .contacts, lastSeen: nil))
        #expect(broker.machine.loadContacts(try Self.lists("alice: bob, carol"), now: broker.now) == .success(1))
        _ = broker.effects()
        #expect(broker.machine.core.view(of: "alice".id, for: "bob".id, now: broker.now).status == .busy)

        broker.now = broker.now + 1_000
        #expect(broker.machine.loadContacts(try Self.lists("alice: carol"), now: broker.now) == .success(1))
        let effects = broker.effects()
        guard effects.count == 1, case .resendViews(let before) = effects[0] else {
            Issue.record("expected one resendViews, got \(effects)")
            return
        }
        #expect(before.view(for: "bob".id).status == .busy)
        let hidden = broker.machine.core.view(of: "alice".id, for: "bob".id, now: broker.now)
        #expect(hidden.status == .offline && hidden.reason == .bye && hidden.sessions == 0)
        #expect(hidden.lastSeen == broker.now && hidden.seq > before.view(for: "bob".id).seq)
        #expect(broker.machine.core.view(of: "alice".id, for: "carol".id, now: broker.now).status == .busy)
        _ = session
    }

    /// A file the core would refuse (a list past `--max-contacts` of this broker) changes nothing, not even the
    /// users listed before the refused one.
    @Test func refusedFileChangesNothing() throws {
        var broker = Scripted { $0.presence.maxContacts = 2 }
        _ = broker.request(.contacts(user: "alice".id, .set(["bob".id])))
        _ = broker.effects()
        let file = try Self.lists("alice: carol\nbob: a1, a2, a3\n")
        guard case .failure(let refusal) = broker.machine.loadContacts(file, now: broker.now) else {
            Issue.record("a list of 3 contacts was taken with --max-contacts 2")
            return
        }
        #expect(refusal.code == .limit)
        #expect(broker.effects().isEmpty)
        #expect(broker.machine.core.contacts(of: "alice".id) == ["bob".id])
        #expect(broker.machine.core.contacts(of: "bob".id).isEmpty)
    }

    /// A node of a cluster takes contacts through op `contacts` only (a file would have to go to etcd whole, from
    /// every node): a load is refused.
    @Test func clusterNodeRefuses() throws {
        var broker = Scripted(cluster: true)
        let result = broker.machine.loadContacts(try Self.lists("alice: bob"), now: broker.now)
        #expect((try? result.get()) == nil)
    }
}
