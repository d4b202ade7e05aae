import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

@Suite("Who may do what")
struct AuthorizationTests {
    static let alice = UserID(validating: "alice")!
    static let bob = UserID(validating: "bob")!
    static let team = GroupID(validating: "team")!
    static let other = GroupID(validating: "other")!
    /// Alice is a member of team, nobody of other.
    static func isMember(_ user: UserID, _ group: GroupID) -> Bool { user == alice && group == team }
    static let owners: [SessionID: UserID] = [SessionID("sa"): alice, SessionID("sb"): bob]

    static func allowed(_ request: Request, _ access: Access) -> Bool {
        Authorization.refusal(of: request, by: access, owner: { owners[$0] }, isMember: isMember) == nil
    }

    /// The table of docs/protocol.md §12, request by request and role by role.
    @Test func requestTable() {
        let user = Access.role(.user(Self.alice))
        let op = Access.role(.operator)
        let reader = Access.role(.reader)
        let rows: [(Request, user: Bool, operator: Bool, reader: Bool)] = [
            (.hello(.init(user: Self.alice)), true, true, false),
            (.hello(.init(user: Self.bob)), false, true, false),
            (.heartbeat(session: SessionID("sa")), true, true, false),
            (.heartbeat(session: SessionID("sb")), false, true, false),
            (.status(session: SessionID("sb"), status: .away, text: nil), false, true, false),
            (.bye(session: SessionID("sb")), false, true, false),
            // An unknown session goes on to fail as unknown_session, which tells nothing.
            (.bye(session: SessionID("nobody")), true, true, false),
            (.query(users: [Self.bob]), true, true, true),
            (.ping, true, true, true),
            (.group(Self.team, GroupEdit()), true, true, true),
            // A user key reads only its user's groups; readers and operators read every group.
            (.group(Self.other, GroupEdit()), false, true, true),
            (.group(Self.team, GroupEdit(add: [Self.alice])), false, true, false),
            (.ungroup(Self.team), false, true, false),
            (.advance(milliseconds: 10), false, true, false),
        ]
        for row in rows {
            #expect(Self.allowed(row.0, user) == row.user, "user: \(row.0)")
            #expect(Self.allowed(row.0, op) == row.operator, "operator: \(row.0)")
            #expect(Self.allowed(row.0, reader) == row.reader, "reader: \(row.0)")
            #expect(Self.allowed(row.0, .open), "open: \(row.0)")
            #expect(!Self.allowed(row.0, .revoked), "revoked: \(row.0)")
        }
    }

    /// A refusal is `forbidden`, and its message says what the key may do.
    @Test func refusalSaysWhatIsAllowed() throws {
        let refusal = try #require(
            Authorization.refusal(
                of: .hello(.init(user: Self.bob)), by: .role(.user(Self.alice)), owner: { _ in nil }))
        #expect(refusal.code == .forbidden)
        #expect(refusal.message.contains("hello as bob"))
        #expect(refusal.message.contains("may say hello as alice"))
    }

    /// Exact topics are open to every role (a group's topic to its members only); any other prefix only to
    /// operators and readers.
    @Test(arguments: [
        ("presence/alice/", true), ("presence/bob/", true), ("group/team/", true), ("broker/", true),
        ("group/other/", false),
        ("presence/", false), ("presence/al", false), ("", false), ("group/", false), ("presence/bob", false),
    ])
    func subscriptions(prefix: String, forUsers: Bool) {
        let bytes = Array(prefix.utf8)
        #expect(
            Authorization.allowsSubscription(to: bytes, by: .role(.user(Self.alice)), isMember: Self.isMember)
                == forUsers)
        #expect(Authorization.allowsSubscription(to: bytes, by: .role(.reader)))
        #expect(Authorization.allowsSubscription(to: bytes, by: .role(.operator)))
        #expect(Authorization.allowsSubscription(to: bytes, by: .open))
        #expect(!Authorization.allowsSubscription(to: bytes, by: .revoked))
    }

    /// Operators see everyone's truth; a user key its own user's only; readers and open access nobody's.
    @Test func truth() {
        #expect(Access.role(.operator).seesTruth(about: Self.bob))
        #expect(Access.role(.user(Self.alice)).seesTruth(about: Self.alice))
        #expect(!Access.role(.user(Self.alice)).seesTruth(about: Self.bob))
        #expect(!Access.role(.reader).seesTruth(about: Self.alice))
        #expect(!Access.open.seesTruth(about: Self.alice))
    }
}

@Suite("Who may read a group")
struct GroupReadAuthorizationTests {
    /// A user key that is not a member gets `forbidden` for a group read, whether the group exists or not (the
    /// answer tells nothing about the group), with a message that says why; without a membership rule given, no
    /// user key reads any group.
    @Test func nonMemberIsForbidden() throws {
        let alice = AuthorizationTests.alice
        let refusal = try #require(
            Authorization.refusal(
                of: .group(AuthorizationTests.other, GroupEdit()), by: .role(.user(alice)), owner: { _ in nil },
                isMember: AuthorizationTests.isMember))
        #expect(refusal.code == .forbidden)
        #expect(refusal.message.contains("reads only the groups alice is a member of"))
        #expect(refusal == Authorization.notMember(alice, AuthorizationTests.other))
        #expect(
            Authorization.refusal(
                of: .group(AuthorizationTests.team, GroupEdit()), by: .role(.user(alice)), owner: { _ in nil })
                != nil)
        #expect(!Authorization.allowsSubscription(to: Array("group/team/".utf8), by: .role(.user(alice))))
    }
}
