import RollCallClientCore
import RollCallCore
import RollCallWire
import Testing

/// What an app's session needs of the machine: starting without network, retrying at once when the network
/// returns, and a status the broker holds (`after_ms`).
@Suite("Session machine in an app")
struct SessionMachineAppTests {
    let alice = PresenceCore.Hello(user: UserID(validating: "alice")!, status: .online)
    let granted = PresenceCore.Granted(session: SessionID("s1"), heartbeatMilliseconds: 1_000, ttlMilliseconds: 3_000)

    /// A session started without network says hello at once, waits for the backoff when nobody answers, and is
    /// live once a broker grants it.
    @Test func startsWithoutNetworkAndSaysHelloWhenItCan() {
        var m = SessionMachine(hello: alice, now: 0, seed: 42)
        #expect(m.phase == .reconnecting(attempt: 0))
        #expect(!m.everGranted)
        #expect(m.next(now: 0) == .send(.hello(alice), reconnectFirst: false))
        m.completed(.unanswered(reason: "no network"), now: 10)
        guard case .sleep(let until) = m.next(now: 10) else {
            Issue.record("no wait after an unanswered hello")
            return
        }
        #expect((810...1_210).contains(until))
        #expect(m.next(now: until) == .send(.hello(alice), reconnectFirst: false))
        m.completed(.granted(granted), now: until)
        #expect(m.phase == .live(SessionID("s1")))
        #expect(m.everGranted)
    }

    /// Closing a session that was never granted sends nothing: there is no session to end.
    @Test func closingBeforeAnyHelloSendsNothing() {
        var m = SessionMachine(hello: alice, now: 0, seed: 42)
        m.close()
        #expect(m.next(now: 0) == .stop)
    }

    /// `reconnectNow` makes a session waiting out its backoff try at once, on a fresh connection.
    @Test func reconnectNowCutsTheBackoff() {
        var m = SessionMachine(hello: alice, granted: granted, now: 0, seed: 42)
        _ = m.next(now: 1_000)
        m.completed(.unanswered(reason: "timeout"), now: 4_000)
        #expect(m.next(now: 4_001) != .send(.heartbeat(session: SessionID("s1")), reconnectFirst: true))
        m.reconnectNow(now: 4_002)
        #expect(m.next(now: 4_002) == .send(.heartbeat(session: SessionID("s1")), reconnectFirst: true))
    }

    /// On a live session `reconnectNow` probes with a heartbeat at once on the same connection; if that goes
    /// unanswered, the next try is on a fresh connection, at once.
    @Test func reconnectNowProbesALiveSession() {
        var m = SessionMachine(hello: alice, granted: granted, now: 0, seed: 42)
        m.reconnectNow(now: 100)
        #expect(m.next(now: 100) == .send(.heartbeat(session: SessionID("s1")), reconnectFirst: false))
        m.completed(.unanswered(reason: "timeout"), now: 3_100)
        #expect(m.next(now: 3_100) == .send(.heartbeat(session: SessionID("s1")), reconnectFirst: true))
    }

    /// A held status carries its `after_ms` to the driver while it is under way, and only then.
    @Test func heldStatusCarriesAfterMilliseconds() {
        var m = SessionMachine(hello: alice, granted: granted, now: 0, seed: 42)
        m.setStatus(.offline, text: nil, afterMilliseconds: 5_000)
        #expect(
            m.next(now: 10)
                == .send(.status(session: SessionID("s1"), status: .offline, text: nil), reconnectFirst: false))
        #expect(m.heldFor == 5_000)
        m.completed(.accepted, now: 12)
        #expect(m.heldFor == nil)
        m.setStatus(.online, text: nil)
        #expect(
            m.next(now: 20)
                == .send(.status(session: SessionID("s1"), status: .online, text: nil), reconnectFirst: false))
        #expect(m.heldFor == nil)
    }

    /// A hello made while a held change waits says the settled status, then sends the held change with its
    /// `after_ms`, so that a broker restart does not publish the held status at once.
    @Test func helloDuringAHeldChangeSaysTheSettledStatus() {
        var m = SessionMachine(hello: alice, granted: granted, now: 0, seed: 42)
        m.setStatus(.away, text: nil, afterMilliseconds: 5_000)
        _ = m.next(now: 10)
        m.completed(.refused(PresenceError(.unknownSession, "gone")), now: 11)
        #expect(m.next(now: 11) == .send(.hello(alice), reconnectFirst: false))
        m.completed(
            .granted(
                PresenceCore.Granted(session: SessionID("s2"), heartbeatMilliseconds: 1_000, ttlMilliseconds: 3_000)),
            now: 12)
        #expect(
            m.next(now: 12) == .send(.status(session: SessionID("s2"), status: .away, text: nil), reconnectFirst: false)
        )
        #expect(m.heldFor == 5_000)
    }
}
