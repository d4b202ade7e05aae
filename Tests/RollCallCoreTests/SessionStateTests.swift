import Testing

@testable import RollCallCore

/// A session's states and transitions, scripted without a core around them.
@Suite("Session states")
struct SessionStateTests {
    typealias Session = PresenceCore.Session
    typealias State = Session.State

    static let start = BrokerTime(milliseconds: 1_000_000)

    static func session(_ state: State) -> Session {
        switch state {
        case .placeholder:
            return .placeholder(user: "u".id, status: .online, text: nil, statusOrder: 1, ttl: 3_000, now: start)
        case .attached(let connection):
            return Session(
                user: "u".id, device: nil, status: .online, text: nil, statusOrder: 1, ttl: 3_000, now: start,
                connection: connection)
        case .detached:
            var session = Session(
                user: "u".id, device: nil, status: .online, text: nil, statusOrder: 1, ttl: 3_000, now: start,
                connection: ConnectionID(9))
            session.detach(now: start, grace: 500)
            return session
        case .remote:
            return .remote(.init(user: "u".id, status: .online), statusOrder: 1, now: start)
        }
    }

    struct Renewal: Sendable, CustomTestStringConvertible {
        var from: State
        var over: UInt64?
        var to: State
        var joined: Bool
        var left: UInt64?
        var testDescription: String { "\(from) renewed over \(over.map(String.init) ?? "untracked") -> \(to)" }
    }

    /// A request renews the session for a TTL and attaches it to the connection it came over; an untracked request
    /// keeps the connection it had; the result says which connection it joined and which it left.
    @Test(arguments: [
        Renewal(from: .attached(ConnectionID(1)), over: 1, to: .attached(ConnectionID(1)), joined: false, left: nil),
        Renewal(from: .attached(ConnectionID(1)), over: 2, to: .attached(ConnectionID(2)), joined: true, left: 1),
        Renewal(from: .attached(ConnectionID(1)), over: nil, to: .attached(ConnectionID(1)), joined: false, left: nil),
        Renewal(from: .attached(nil), over: 3, to: .attached(ConnectionID(3)), joined: true, left: nil),
        Renewal(from: .attached(nil), over: nil, to: .attached(nil), joined: false, left: nil),
        Renewal(from: .detached, over: 2, to: .attached(ConnectionID(2)), joined: true, left: nil),
        Renewal(from: .detached, over: nil, to: .attached(nil), joined: false, left: nil),
    ])
    func renewal(_ step: Renewal) {
        var session = Self.session(step.from)
        let later = Self.start + 700
        let move = session.renew(over: step.over.map(ConnectionID.init), now: later)
        #expect(session.state == step.to)
        #expect(move.joined == step.joined)
        #expect(move.left == step.left.map(ConnectionID.init))
        #expect(session.expiresAt == later + 3_000)
        #expect(session.expiryReason == .timeout)
    }

    /// A closed connection detaches the session until the grace runs out, never past its own TTL; it then ends
    /// with reason closed.
    @Test(arguments: [(500 as Int64, 500 as Int64), (10_000, 3_000)])
    func detachWaitsOutTheGrace(grace: Int64, endsAfter: Int64) {
        var session = Self.session(.attached(ConnectionID(1)))
        session.detach(now: Self.start, grace: grace)
        #expect(session.state == .detached)
        #expect(session.connection == nil)
        #expect(session.expiresAt == Self.start + endsAfter)
        #expect(session.expiryReason == .closed)
    }

    /// Each state ends for its own reason when its deadline comes, and only an attached one has a connection.
    @Test func reasonsAndConnections() {
        #expect(Self.session(.attached(ConnectionID(4))).connection == ConnectionID(4))
        #expect(Self.session(.attached(nil)).connection == nil)
        #expect(Self.session(.placeholder).connection == nil)
        #expect(Self.session(.placeholder).isPlaceholder)
        #expect(Self.session(.placeholder).expiryReason == .restart)
        #expect(Self.session(.detached).expiryReason == .closed)
        #expect(Self.session(.remote).connection == nil)
        #expect(Self.session(.remote).isRemote && !Self.session(.remote).isNameable)
        #expect(Self.session(.attached(nil)).expiryReason == .timeout)
    }
}
