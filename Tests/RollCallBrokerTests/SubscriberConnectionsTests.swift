import Foundation
import Testing
import ZeroMQ

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

    /// Overlapping handshakes (a refused key's retries beside a subscriber): a close among the undecided counts for
    /// nothing, so a failed handshake never makes the gate drop anyone's subscriptions; once as few are left as
    /// succeeded, they are subscribers. A connection accepted after the success is not touched.
    @Test func overlappingHandshakesStayUndecidedUntilTheyCanBeTold() {
        var connections = SubscriberConnections()
        connections.accepted(5)
        connections.accepted(6)
        connections.handshakeSucceeded()
        connections.accepted(9)
        #expect(connections.open == [5, 6, 9])
        #expect(connections.disconnected(6) == false)
        #expect(connections.disconnected(5) == true)
        #expect(connections.disconnected(9) == false)
        // Two successes among three (the second when none is unsettled: one of the undecided): one close leaves
        // two, both subscribers.
        connections.accepted(4)
        connections.accepted(7)
        connections.accepted(8)
        connections.handshakeSucceeded()
        connections.handshakeSucceeded()
        #expect(connections.disconnected(8) == false)
        #expect(connections.disconnected(7) == true && connections.disconnected(4) == true)
        #expect(connections.open.isEmpty)
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

/// The same machine fed by a real XPUB's monitor, as the loop feeds it: a CURVE subscriber that subscribed and left
/// counts, a TCP peer that never completed a handshake does not.
@Suite("Update socket connections on libzmq's own events")
struct SubscriberConnectionsOnLibzmqTests {
    @Test func aRealSubscribersCloseCountsAndAHandshakelessOneDoesNot() throws {
        let context = try Context()
        let server = try Curve.keyPair()
        let client = try Curve.keyPair()
        let xpub = try Socket(context, .xpub)
        try xpub.set(.linger(milliseconds: 0))
        try xpub.set(.curveServer(true))
        try xpub.set(.curveSecretKey(server.secretKey))
        let monitor = try xpub.monitor(
            [.accepted, .handshakeSucceeded, .disconnected], name: "subscriber-connections", context: context)
        try xpub.bind("tcp://127.0.0.1:*")
        let endpoint = try xpub.lastEndpoint()
        var connections = SubscriberConnections()
        var closes: [Bool] = []
        /// Waits, with `zmq_poll`, until `socket` has something to read, at most until `deadline`.
        func awaitReadable(_ socket: Socket, until deadline: ContinuousClock.Instant, _ what: String) throws {
            var poller = Poller([socket])
            let left = Int((deadline - ContinuousClock.now) / .milliseconds(1))
            guard left > 0, try poller.poll(timeout: left)[0] else { throw Failure("\(what) within 5 s") }
        }
        /// Feeds the monitor's events to the machine until `done` says so, within 5 s.
        func feed(until done: () -> Bool) throws {
            let deadline = ContinuousClock.now + .seconds(5)
            while !done() {
                guard let event = try monitor.receiveMonitorEvent() else {
                    try awaitReadable(monitor, until: deadline, "no such events: \(closes)")
                    continue
                }
                switch event.kind {
                case .accepted: connections.accepted(event.value)
                case .handshakeSucceeded: connections.handshakeSucceeded()
                case .disconnected: closes.append(connections.disconnected(event.value))
                default: break
                }
            }
        }

        let subscriber = try Socket(context, .xsub)
        try subscriber.set(.linger(milliseconds: 0))
        try subscriber.set(.curveServerKey(server.publicKey))
        try subscriber.set(.curvePublicKey(client.publicKey))
        try subscriber.set(.curveSecretKey(client.secretKey))
        try subscriber.connect(endpoint)
        _ = try subscriber.send([1] + Array("presence/bob/".utf8))
        let deadline = ContinuousClock.now + .seconds(5)
        while try xpub.receiveFrame() == nil {
            try awaitReadable(xpub, until: deadline, "the subscription never arrived")
        }
        subscriber.close()
        try feed { closes.count == 1 }
        #expect(closes == [true])

        // A peer that opens a TCP connection and closes it without a handshake.
        let port = try #require(endpoint.split(separator: ":").last.flatMap { UInt16($0) })
        let raw = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(raw, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        #expect(connected == 0)
        try feed { !connections.open.isEmpty }
        close(raw)
        try feed { closes.count == 2 }
        #expect(closes == [true, false])
        #expect(connections.open.isEmpty)
    }
}
