import RollCallCluster
import RollCallCore
import RollCallSecurity
import Testing
import ZeroMQ

@testable import RollCallBroker

#if canImport(Glibc)
    import Glibc
#endif

/// A CURVE key removed by a reload (issue #23): the machine ends the sessions of its connections, reason `revoked`;
/// the tracker names its command connections; the gate says where it connected from. On a clock the test moves.
@Suite("Revocation of a removed key")
struct RevocationTests {
    /// The sessions whose latest request came over a revoked connection end at once, reason `revoked`; those on
    /// other connections are untouched, and the connection's later close ends nothing more.
    @Test func revokedConnectionsLoseTheirSessions() throws {
        var broker = Scripted()
        _ = try broker.hello("alice", ttl: 60_000, connection: ConnectionID(1))
        _ = try broker.hello("carol", ttl: 60_000, connection: ConnectionID(1))
        _ = try broker.hello("bob", ttl: 60_000, connection: ConnectionID(2))
        _ = try broker.hello("dave", ttl: 60_000, connection: ConnectionID(1))
        _ = try broker.hello("dave", ttl: 60_000, connection: ConnectionID(2))
        _ = broker.effects()

        #expect(broker.machine.revoke([ConnectionID(1)], now: broker.now) == 3)
        let records = broker.published()
        #expect(records.map(\.user) == ["alice".id, "carol".id, "dave".id])
        #expect(records[0].status == .offline && records[0].reason == .revoked)
        #expect(records[1].status == .offline && records[1].reason == .revoked)
        // Dave keeps the session of the connection that stays.
        #expect(records[2].status == .online && records[2].sessions == 1)
        #expect(try broker.query("bob").first?.status == .online)
        #expect(try broker.query("alice").first?.reason == .revoked)
        #expect(broker.machine.core.sessionsEnded[.revoked] == 3)

        #expect(broker.machine.connectionClosed(ConnectionID(1), now: broker.now) == 0)
        #expect(broker.machine.revoke([ConnectionID(1)], now: broker.now) == 0)
        broker.advance(120_000)  // bob's and dave's TTLs run out; the revoked sessions do not end twice
        #expect(broker.published().allSatisfy { $0.reason == .timeout })
    }

    /// No grace period for a revocation: a grace period is for a client that may come back, and this one may not.
    @Test func revocationIgnoresTheGracePeriod() throws {
        var broker = Scripted(graceMilliseconds: 5_000)
        _ = try broker.hello("alice", ttl: 60_000, connection: ConnectionID(1))
        _ = broker.effects()
        #expect(broker.machine.revoke([ConnectionID(1)], now: broker.now) == 1)
        #expect(broker.published().map(\.reason) == [.revoked])
    }

    /// A session that moved to another connection (a heartbeat over it) is not the revoked connection's any more.
    @Test func aSessionThatMovedIsNotRevoked() throws {
        var broker = Scripted()
        let session = try broker.hello("alice", ttl: 60_000, connection: ConnectionID(1))
        _ = broker.request(.heartbeat(session: session), connection: ConnectionID(2))
        _ = broker.effects()
        #expect(broker.machine.revoke([ConnectionID(1)], now: broker.now) == 0)
        #expect(broker.published().isEmpty)
        #expect(try broker.query("alice").first?.status == .online)
    }

    /// On a node of a cluster the end goes to etcd with reason `revoked`, and nothing is published here.
    @Test func aNodeWritesTheRevokedEnd() throws {
        var node = Scripted(cluster: true)
        _ = try node.hello("alice", connection: ConnectionID(4))
        _ = node.effects()
        #expect(node.machine.revoke([ConnectionID(4)], now: node.now) == 1)
        let effects = node.effects()
        #expect(!BrokerMachineClusterTests.hasPublication(effects))
        guard case .endSession(_, let user?) = BrokerMachineClusterTests.writes(effects).first else {
            Issue.record("no end of alice's session: \(effects)")
            return
        }
        #expect(ClusterValues.decodeEnding(user.record)?.reason == .revoked)
    }

    /// The tracker knows each command connection's key from its first request, forgets it with the connection,
    /// and a descriptor reused by another connection is not the revoked key's.
    @Test func trackerNamesTheKeysConnections() {
        var tracker = ConnectionTracker()
        _ = tracker.apply(.accepted(descriptor: 7))
        _ = tracker.apply(.accepted(descriptor: 8))
        _ = tracker.apply(.accepted(descriptor: 9))
        #expect(
            tracker.origin(descriptor: 7, routingID: [0, 0, 0, 0, 1], userID: "K1") == .connection(ConnectionID(1)))
        #expect(
            tracker.origin(descriptor: 8, routingID: [0, 0, 0, 0, 2], userID: "K2") == .connection(ConnectionID(2)))
        #expect(
            tracker.origin(descriptor: 9, routingID: [0, 0, 0, 0, 3], userID: "K1") == .connection(ConnectionID(3)))
        let revoked = tracker.connections { $0 == "K1" }
        #expect(revoked.map(\.descriptor) == [7, 9])
        #expect(revoked.map(\.connection.id) == [ConnectionID(1), ConnectionID(3)])

        _ = tracker.apply(.disconnected(descriptor: 7))
        _ = tracker.apply(.accepted(descriptor: 7))  // another client, no request yet
        #expect(tracker.connections { $0 == "K1" }.map(\.descriptor) == [9])
        #expect(tracker.connections { $0 == "K2" }.map(\.descriptor) == [8])
    }

    /// The gate remembers where each key passed ZAP from; a reload reports the removed keys and their addresses,
    /// and forgets them.
    @Test func gateReportsWhereARemovedKeyConnectedFrom() {
        let (alice, bob) = (CurveGateTests.key(1), CurveGateTests.key(2))
        var gate = CurveGate(keys: AuthorizedKeys(roles: [alice.key: .operator, bob.key: .reader]))
        func handshake(_ key: [UInt8], from address: String) {
            var request = CurveGateTests.request(credentials: key)
            request[3] = Array(address.utf8)
            _ = gate.zapReply(to: request)
        }
        handshake(alice.bytes, from: "10.0.0.1")
        handshake(alice.bytes, from: "10.0.0.2")
        handshake(bob.bytes, from: "10.0.0.3")
        let reload = gate.replace(with: AuthorizedKeys(roles: [bob.key: .reader]))
        #expect(reload?.removed == [alice.key])
        #expect(reload?.addresses == ["10.0.0.1", "10.0.0.2"])
        #expect(reload?.mayBeRevoked(address: "10.0.0.2") == true)
        #expect(reload?.mayBeRevoked(address: "10.0.0.3") == false)
        #expect(reload?.mayBeRevoked(address: nil) == true)  // unreadable: may be anyone's
        // Nothing removed: no connection is the removed keys'.
        let again = gate.replace(with: AuthorizedKeys(roles: [bob.key: .reader, alice.key: .reader]))
        #expect(again?.removed == [] && again?.added == 1)
        #expect(again?.mayBeRevoked(address: "10.0.0.3") == false)
        #expect(again?.mayBeRevoked(address: nil) == false)
        // bob made a user: a rebound key, whose update connections go (what libzmq applied for a reader stays).
        let rebound = gate.replace(with: AuthorizedKeys(roles: [bob.key: .user("bob".id), alice.key: .reader]))
        #expect(rebound?.removed == [] && rebound?.rebound == [bob.key])
        #expect(rebound?.mayBeRevoked(address: "10.0.0.3") == true)
        #expect(rebound?.mayBeRevoked(address: "10.0.0.1") == false)
    }

    /// A key seen from more addresses than are remembered may have an update connection anywhere.
    @Test func aKeySeenEverywhereMayBeAnywhere() {
        let alice = CurveGateTests.key(1)
        var gate = CurveGate(keys: AuthorizedKeys(roles: [alice.key: .operator]))
        for n in 0...CurveGate.maxAddressesPerKey {
            var request = CurveGateTests.request(credentials: alice.bytes)
            request[3] = Array("10.0.\(n / 256).\(n % 256)".utf8)
            _ = gate.zapReply(to: request)
        }
        #expect(gate.addresses.isEmpty)
        let reload = gate.replace(with: AuthorizedKeys())
        #expect(reload?.anyAddress == true)
        #expect(reload?.mayBeRevoked(address: "192.168.1.1") == true)
    }

    /// The descriptor helpers on a real pair of connected sockets: the peer is named, and a shutdown
    /// makes the other end read end-of-file while the descriptor stays open.
    @Test func descriptorHelpersOnARealConnection() throws {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { for fd in fds { close(fd) } }
        // A Unix socket's peer is named by its credentials, as libzmq names it to ZAP (here, this process).
        let peer = ConnectionDescriptor.peerAddress(fds[0])
        #expect(peer?.hasSuffix(":\(getuid()):\(getgid()):\(getpid())") == true, "\(peer ?? "nil")")
        #expect(ConnectionDescriptor.peerAddress(-1) == nil)
        #expect(ConnectionDescriptor.shutDown(fds[0]))
        var byte: UInt8 = 0
        #expect(read(fds[1], &byte, 1) == 0)  // end-of-file
        #expect(fcntl(fds[0], F_GETFD) != -1)  // still open: libzmq's to close
        #expect(!ConnectionDescriptor.shutDown(-1))
    }
}
