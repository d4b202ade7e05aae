import Testing

@testable import RollCallBroker

/// Which of the update socket's connections may have left subscriptions behind, from monitor events that name no
/// connection for a handshake's success.
@Suite("Update socket connections")
struct SubscriberConnectionsTests {
    /// Handshakes one at a time: each success is put down to its connection, and only a subscriber's close counts.
    @Test func oneHandshakeAtATimeIsJudgedExactly() {
        var connections = SubscriberConnections()
        connections.accepted(7)
        connections.handshakeSucceeded()
        connections.accepted(8)  // a peer that never completes its handshake
        #expect(connections.open == [7, 8])
        #expect(connections.disconnected(8) == false)
        #expect(connections.disconnected(7) == true)
        #expect(connections.open.isEmpty)
        // A close the monitor reports twice, or of a descriptor it never reported, is harmless.
        #expect(connections.disconnected(7) == false)
        #expect(connections.disconnected(99) == false)
    }

    /// Overlapping handshakes: a success is put down to every unsettled connection, so the close of the one that
    /// did not succeed counts too (the safe side), and a connection accepted after the success is not touched.
    @Test func overlappingHandshakesErrOnTheSafeSide() {
        var connections = SubscriberConnections()
        connections.accepted(5)
        connections.accepted(6)
        connections.handshakeSucceeded()
        connections.accepted(9)
        #expect(connections.disconnected(6) == true)
        #expect(connections.disconnected(5) == true)
        #expect(connections.disconnected(9) == false)
    }

    /// A descriptor reused after a close starts unsettled again: its earlier life says nothing about the new one.
    @Test func aReusedDescriptorStartsAgain() {
        var connections = SubscriberConnections()
        connections.accepted(4)
        connections.handshakeSucceeded()
        connections.accepted(4)  // the monitor's close was missed, or reported late
        #expect(connections.disconnected(4) == false)
    }

    /// The event values libzmq 4.3.4 really gives: 0 for a handshake's success, which must not be taken for a
    /// descriptor (the bug this replaced: closes of real descriptors never counted).
    @Test func aSuccessIsNotADescriptor() {
        var connections = SubscriberConnections()
        connections.accepted(12)
        connections.handshakeSucceeded()
        #expect(!connections.open.contains(0))
        #expect(connections.disconnected(12) == true)
    }
}
