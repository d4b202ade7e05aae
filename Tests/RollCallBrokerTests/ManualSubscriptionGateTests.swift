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
        #expect(!gate.unsafe)
    }

    /// After a message that is not a subscription, or a subscriber's disconnect, and until the XPUB is read empty,
    /// nothing is applied, exact topics included (they could land on another connection, or on a freed one); then
    /// all is as before.
    @Test(arguments: [false, true])
    func unsafeUntilDrained(byDisconnect: Bool) {
        var gate = ManualSubscriptionGate()
        if byDisconnect {
            gate.subscriberLeft()
        } else {
            #expect(gate.decide(.other, allowed: true) == .ignore)
        }
        #expect(gate.unsafe)
        #expect(gate.decide(.subscribe(exactTopic: false), allowed: true) == .refuse)
        #expect(gate.decide(.subscribe(exactTopic: true), allowed: true) == .refuse)
        #expect(gate.decide(.unsubscribe(fromPeer: true), allowed: true) == .refuse)
        #expect(gate.decide(.unsubscribe(fromPeer: false), allowed: true) == .ignore)
        gate.drained()
        #expect(gate.decide(.subscribe(exactTopic: true), allowed: true) == .apply)
        #expect(gate.decide(.subscribe(exactTopic: false), allowed: true) == .apply)
    }
}
