import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallSecurity
import RollCallWire
import Testing

extension Integration {
    /// Who may see whom over the command endpoint with real CURVE keys (docs/privacy.md).
    @Suite("Privacy over CURVE")
    struct PrivacyCurveTests {
        /// A contacts-only user: a contact's key reads the truth, a stranger's key the record of a bye; operator and
        /// reader keys the truth; a user key may not edit contacts nor another user's policy, and nothing changes.
        @Test func contactsOnlyUserInQuery() async throws {
            let keys = try TestKeys("alice", "bob", "zoe", "op", "reader")
            let table = try keys.authorizedKeys([
                ("alice", "user alice"), ("bob", "user bob"), ("zoe", "user zoe"), ("op", "operator"),
                ("reader", "reader"),
            ])
            try await withBroker({
                $0.curve = CurveSettings(secretKey: keys.server.secretKey, authorizedKeys: table)
            }) { broker in
                var clients: [String: CommandClient] = [:]
                for name in ["alice", "bob", "zoe", "op", "reader"] {
                    clients[name] = try CommandClient(endpoint: broker.command, credentials: keys.credentials(name))
                }
                let alice = "alice".id
                _ = try clients["alice"]!.hello(.init(user: alice, status: .busy, text: "x"))
                #expect(
                    rejection(of: { _ = try clients["alice"]!.call(.contacts(user: alice, .set(["zoe".id]))) })
                        == .forbidden)
                _ = try clients["op"]!.call(.contacts(user: alice, .set(["bob".id])))
                _ = try clients["alice"]!.call(.privacy(user: alice, visibility: .contacts, lastSeen: nil))
                #expect(
                    rejection(of: {
                        _ = try clients["zoe"]!.call(.privacy(user: alice, visibility: .everyone, lastSeen: nil))
                    }) == .forbidden)

                #expect(try clients["bob"]!.query([alice])[alice]?.status == .busy)
                let hidden = try #require(try clients["zoe"]!.query([alice])[alice])
                #expect(hidden.status == .offline && hidden.reason == .bye)
                #expect(hidden.sessions == 0 && hidden.text == nil)
                for truth in ["op", "reader", "alice"] {
                    #expect(try clients[truth]!.query([alice])[alice]?.status == .busy, "\(truth)")
                }
            }
        }
    }
}
