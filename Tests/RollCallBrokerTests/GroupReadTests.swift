import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

@testable import RollCallBroker

/// Groups are read by their members, readers and operators (docs/privacy.md): decided by the machine and the
/// WebSocket table, without a socket.
@Suite("Broker machine: who reads a group")
struct GroupReadTests {
    static let alice = Access.role(.user("alice".id))
    static let zoe = Access.role(.user("zoe".id))

    static func read(_ broker: inout Scripted, _ group: String, _ access: Access) -> Result<Reply, PresenceError> {
        broker.request(.group(group.group, GroupEdit()), access: access)
    }

    /// A member's `user` key reads the group; a non-member's gets `forbidden`, whether the group exists or not, and
    /// the refusal publishes nothing; readers, operators and open access read it.
    @Test func membersReadOthersAreForbidden() throws {
        var broker = Scripted()
        _ = broker.request(.group("team".group, GroupEdit(members: ["alice".id, "bob".id])), access: .role(.operator))
        _ = broker.effects()
        guard case .success(.group(let snapshot)) = Self.read(&broker, "team", Self.alice) else {
            Issue.record("a member could not read its group")
            return
        }
        #expect(snapshot.counts.total == 2)
        for group in ["team", "nosuchgroup"] {
            guard case .failure(let refusal) = Self.read(&broker, group, Self.zoe) else {
                Issue.record("a non-member read \(group)")
                continue
            }
            #expect(refusal.code == .forbidden)
        }
        #expect(broker.effects().isEmpty)
        for access in [Access.role(.reader), .role(.operator), .open] {
            #expect((try? Self.read(&broker, "team", access).get()) != nil, "\(access)")
        }
    }

    /// Membership is read at each request: a member taken out is refused from its next read, one added reads.
    @Test func membershipIsReadAtEachRequest() throws {
        var broker = Scripted()
        _ = broker.request(.group("team".group, GroupEdit(members: ["alice".id])), access: .role(.operator))
        #expect((try? Self.read(&broker, "team", Self.alice).get()) != nil)
        _ = broker.request(.group("team".group, GroupEdit(members: ["zoe".id])), access: .role(.operator))
        #expect((try? Self.read(&broker, "team", Self.alice).get()) == nil)
        #expect((try? Self.read(&broker, "team", Self.zoe).get()) != nil)
    }

    /// A `user` token subscribes to the topic of its user's groups only; the refusal is `forbidden` and subscribes
    /// the connection to none of the topics asked; readers subscribe to any group.
    @Test func webSocketSubscriptionToGroupTopic() throws {
        var table = GatewayTableTests.table(
            (GatewayTableTests.one, Self.alice), (GatewayTableTests.two, .role(.reader)))
        let isMember = { (user: UserID, group: GroupID) in user == "alice".id && group == "team".group }
        let member = table.subscribe(
            GatewayTableTests.one, to: [.group("team".group)], maxTopics: 10, isMember: isMember)
        #expect(member.flatMap { try? $0.get() } == [.group("team".group)])
        guard
            case .failure(let refusal)? = table.subscribe(
                GatewayTableTests.one, to: [.presence("bob".id), .group("other".group)], maxTopics: 10,
                isMember: isMember)
        else {
            Issue.record("a non-member subscribed to group/other/")
            return
        }
        #expect(refusal.code == .forbidden && refusal.message.contains("member"))
        #expect(table.peers[GatewayTableTests.one]?.topics == [Topic.group("team".group).bytes])
        let reader = table.subscribe(
            GatewayTableTests.two, to: [.group("other".group)], maxTopics: 10, isMember: isMember)
        #expect(reader.flatMap { try? $0.get() } == [.group("other".group)])
    }
}
