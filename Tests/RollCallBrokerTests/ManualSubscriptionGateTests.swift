import Testing

@testable import RollCallBroker

@Suite("Manual-mode subscription gate")
struct ManualSubscriptionGateTests {
    /// In step, allowed subscriptions and peers' unsubscriptions are applied; refused ones are not; libzmq's own
    /// unsubscriptions have nothing to apply.
    @Test func inStep() {
        var gate = ManualSubscriptionGate()
        #expect(gate.decide(.subscribe(exactTopic: true), allowed: true) == .apply)
        #expect(gate.decide(.subscribe(exactTopic: false), allowed: true) == .apply)
        #expect(gate.decide(.subscribe(exactTopic: false), allowed: false) == .refuse)
        #expect(gate.decide(.unsubscribe(fromPeer: true), allowed: true) == .apply)
        #expect(gate.decide(.unsubscribe(fromPeer: false), allowed: true) == .ignore)
        #expect(!gate.skewed)
    }

    /// After a message that is not a subscription, and until the XPUB is read empty, only exact topics are
    /// applied, never a prefix (which could land on another connection) nor an unsubscription; then all is as
    /// before.
    @Test func skewedUntilDrained() {
        var gate = ManualSubscriptionGate()
        #expect(gate.decide(.other, allowed: true) == .ignore)
        #expect(gate.skewed)
        #expect(gate.decide(.subscribe(exactTopic: false), allowed: true) == .refuse)
        #expect(gate.decide(.subscribe(exactTopic: true), allowed: true) == .apply)
        #expect(gate.decide(.subscribe(exactTopic: true), allowed: false) == .refuse)
        #expect(gate.decide(.unsubscribe(fromPeer: true), allowed: true) == .refuse)
        gate.drained()
        #expect(gate.decide(.subscribe(exactTopic: false), allowed: true) == .apply)
    }
}
