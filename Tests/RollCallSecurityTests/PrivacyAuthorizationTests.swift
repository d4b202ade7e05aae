import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

@Suite("Who may set privacy")
struct PrivacyAuthorizationTests {
    /// `privacy` and `block`: the user's own keys and operators; `contacts`: operators only; readers neither; open
    /// access everything.
    @Test func privacyTable() {
        let alice = UserID(validating: "alice")!
        let bob = UserID(validating: "bob")!
        let rows: [(Request, user: Bool, operator: Bool, reader: Bool)] = [
            (.privacy(user: alice, visibility: .contacts, lastSeen: nil), true, true, false),
            (.privacy(user: bob, visibility: nil, lastSeen: nil), false, true, false),
            (.block(user: alice, .add([bob])), true, true, false),
            (.block(user: bob, .add([alice])), false, true, false),
            (.contacts(user: alice, .set([bob])), false, true, false),
        ]
        for (request, user, op, reader) in rows {
            let allowed = { (access: Access) in Authorization.refusal(of: request, by: access, owner: { _ in nil }) }
            #expect((allowed(.role(.user(alice))) == nil) == user, "\(request)")
            #expect((allowed(.role(.operator)) == nil) == op, "\(request)")
            #expect((allowed(.role(.reader)) == nil) == reader, "\(request)")
            #expect(allowed(.open) == nil)
            #expect(allowed(.revoked)?.code == .forbidden)
        }
    }
}
