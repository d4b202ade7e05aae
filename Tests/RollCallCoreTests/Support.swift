import RollCallCore

/// A clock the tests move by hand.
struct ManualClock {
    var now = BrokerTime(milliseconds: 1_700_000_000_000)
    mutating func advance(_ milliseconds: Int64) { now = now + milliseconds }
}

/// A core, a manual clock and a session-id counter, with shorthands for the common events.
struct Harness {
    var core: PresenceCore
    var clock = ManualClock()
    var nextSession = 0

    init(_ configure: (inout PresenceCore.Configuration) -> Void = { _ in }) {
        var configuration = PresenceCore.Configuration()
        configure(&configuration)
        core = PresenceCore(configuration: configuration)
    }

    var now: BrokerTime { clock.now }

    mutating func hello(
        _ user: String, status: Status = .online, text: String? = nil, ttl: Int64? = nil,
        connection: UInt64? = nil
    ) -> (Result<PresenceCore.Granted, PresenceError>, [PresenceRecord]) {
        nextSession += 1
        let outcome = core.hello(
            .init(user: user.id, status: status, text: text, ttlMilliseconds: ttl),
            session: SessionID("s\(nextSession)"), connection: connection.map(ConnectionID.init), now: clock.now)
        return (outcome.reply, outcome.updates)
    }

    /// Opens a session that must succeed and returns its id.
    mutating func open(_ user: String, status: Status = .online, text: String? = nil, connection: UInt64? = nil)
        -> SessionID
    {
        let (reply, _) = hello(user, status: status, text: text, connection: connection)
        return try! reply.get().session
    }

    func record(_ user: String) -> PresenceRecord { core.record(of: user.id, now: clock.now) }
}

extension String {
    var id: UserID { UserID(validating: self)! }
}

extension Result {
    var error: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

extension PresenceCore {
    /// The group messages a tick at `now` publishes: what the group tests look at (their sessions never expire).
    mutating func flushGroups(now: BrokerTime) -> [GroupUpdate] { tick(now: now).groupUpdates }
}
