/// Who may see one side of a user's presence (docs/privacy.md).
public enum Audience: String, Sendable, CaseIterable {
    /// Every viewer: the default, and RollCall's behaviour before privacy existed.
    case everyone
    /// Only the viewers in the user's contacts.
    case contacts
    /// No viewer but the user itself (and readers and operators, who see the truth).
    case nobody
}

/// A user's privacy policy: who sees the status and text, and who sees `last_seen` and `since` of the user offline.
public struct PrivacyPolicy: Sendable, Equatable {
    public var visibility: Audience
    public var lastSeen: Audience

    public init(visibility: Audience = .everyone, lastSeen: Audience = .everyone) {
        self.visibility = visibility
        self.lastSeen = lastSeen
    }
}

/// What one viewer may see of one user.
public struct Sight: Sendable, Equatable {
    /// The status, text and session count; without it the viewer gets the frozen record of a user who said bye.
    public var status: Bool
    /// `last_seen` and `since` of the user offline; without it both are null.
    public var lastSeen: Bool

    public init(status: Bool, lastSeen: Bool) {
        self.status = status
        self.lastSeen = lastSeen
    }

    public static let full = Sight(status: true, lastSeen: true)
}

/// An edit of a user's list of contacts or blocks: exactly one verb.
public enum ListEdit: Sendable, Equatable {
    case set([UserID])
    case add([UserID])
    case remove([UserID])
}

/// What one user chose: the policy and both lists, without what the broker derives from them (the frozen records).
/// What a node of a cluster writes to etcd for every privacy edit.
public struct PrivacyChoices: Sendable, Equatable {
    public var policy: PrivacyPolicy
    public var contacts: Set<UserID>
    public var blocks: Set<UserID>

    public init(policy: PrivacyPolicy = PrivacyPolicy(), contacts: Set<UserID> = [], blocks: Set<UserID> = []) {
        self.policy = policy
        self.contacts = contacts
        self.blocks = blocks
    }
}

/// One user's privacy settings, as they are kept across restarts.
public struct PrivacySettings: Sendable, Equatable {
    public var user: UserID
    public var policy: PrivacyPolicy
    public var contacts: [UserID]
    public var blocks: [UserID]
    /// The record that viewers hidden by the policy, and never seen individually, get.
    public var mask: PresenceRecord?
    /// The records frozen for viewers who lost sight one by one (a contact removed, a block added).
    public var frozen: [PresenceRecord.Frozen]

    public init(
        user: UserID, policy: PrivacyPolicy, contacts: [UserID], blocks: [UserID], mask: PresenceRecord?,
        frozen: [PresenceRecord.Frozen]
    ) {
        self.user = user
        self.policy = policy
        self.contacts = contacts
        self.blocks = blocks
        self.mask = mask
        self.frozen = frozen
    }

    /// Whether these settings are the defaults and hold nothing: such a user needs no row.
    public var isEmpty: Bool {
        policy == PrivacyPolicy() && contacts.isEmpty && blocks.isEmpty && mask == nil && frozen.isEmpty
    }
}

extension PresenceRecord {
    /// A record frozen for one viewer, with the viewer it is for.
    public struct Frozen: Sendable, Equatable {
        public var viewer: UserID
        public var record: PresenceRecord
        public init(viewer: UserID, record: PresenceRecord) {
            self.viewer = viewer
            self.record = record
        }
    }
}

/// The privacy state of one user inside the core.
struct PrivacyState: Sendable {
    var policy = PrivacyPolicy()
    var contacts: Set<UserID> = []
    var blocks: Set<UserID> = []
    /// What hidden viewers without a frozen record of their own get (see ``PresenceCore/view(of:for:now:)``).
    var mask: PresenceRecord?
    var frozen: [UserID: PresenceRecord] = [:]
    /// The seq reserved by the latest privacy change of this user: every view of the user is at least this.
    var seq: UInt64 = 0

    func sight(_ viewer: UserID) -> Sight {
        if blocks.contains(viewer) { return Sight(status: false, lastSeen: false) }
        return Sight(status: allows(policy.visibility, viewer), lastSeen: allows(policy.lastSeen, viewer))
    }

    /// Whether viewers in no list (neither contacts nor blocked) see the status.
    var strangersSee: Bool { policy.visibility == .everyone }

    /// Whether some viewer may not see the status: the broker heartbeat's counts leave such a user out.
    var concealed: Bool { !strangersSee || !blocks.isEmpty }

    private func allows(_ audience: Audience, _ viewer: UserID) -> Bool {
        switch audience {
        case .everyone: true
        case .contacts: contacts.contains(viewer)
        case .nobody: false
        }
    }

    var isEmpty: Bool {
        policy == PrivacyPolicy() && contacts.isEmpty && blocks.isEmpty && mask == nil && frozen.isEmpty
    }
}
