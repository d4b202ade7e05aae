import RollCallCore
import RollCallStore
import Testing

@Suite("Privacy store")
struct PrivacyStoreTests {
    static func settings(_ user: String) -> PrivacySettings {
        var frozen = PresenceRecord(
            user: user.user, status: .offline, since: at(5), lastSeen: at(5), sessions: 0, seq: 5_000,
            reason: .bye)
        let mask = frozen
        frozen.seq = 6_000
        return PrivacySettings(
            user: user.user, policy: PrivacyPolicy(visibility: .contacts, lastSeen: .nobody),
            contacts: ["bob".user, "carol".user], blocks: ["mallory".user], mask: mask,
            frozen: [PresenceRecord.Frozen(viewer: "dan".user, record: frozen)])
    }

    /// Settings read back equal, mask and frozen records included; newer settings replace them, and empty settings
    /// delete them.
    @Test(arguments: StoreKind.allCases) func settingsRoundTrip(kind: StoreKind) throws {
        try kind.withStore { store in
            let alice = Self.settings("alice")
            var zoe = Self.settings("zoe")
            zoe.mask = nil
            zoe.frozen = []
            try store.write(StoreBatch(brokerTime: at(1), privacy: [zoe, alice]))
            #expect(try store.load().privacy == [alice, zoe])

            var changed = alice
            changed.contacts = ["erin".user]
            changed.policy.lastSeen = .everyone
            let cleared = PrivacySettings(
                user: "zoe".user, policy: PrivacyPolicy(), contacts: [], blocks: [], mask: nil, frozen: [])
            try store.write(StoreBatch(brokerTime: at(2), privacy: [changed, cleared]))
            #expect(try store.load().privacy == [changed])
        }
    }
}
