import RollCallCore
import Testing

@testable import RollCallBroker

/// The connection tracker, scripted: every interleaving of monitor events and requests that libzmq can produce,
/// without a socket.
@Suite("Connection tracker")
struct ConnectionTrackerTests {
    /// Generated routing ids, as libzmq makes them: five bytes, the first zero.
    static let a: [UInt8] = [0, 0, 0, 0, 1]
    static let b: [UInt8] = [0, 0, 0, 0, 2]
    static let custom = Array("alice-phone".utf8)

    /// One step of a script: a monitor event (and the connections it must report closed), or a request with the
    /// origin it must get, either on the fast path (no events read) or after the pending events.
    enum Step: CustomStringConvertible {
        case accepted(Int32, closes: [UInt64] = [])
        case disconnected(Int32, closes: [UInt64] = [])
        case request(Int32, [UInt8], RequestOrigin, fast: Bool = false)

        var description: String {
            switch self {
            case .accepted(let fd, let closes): "accepted fd \(fd) closes \(closes)"
            case .disconnected(let fd, let closes): "disconnected fd \(fd) closes \(closes)"
            case .request(let fd, let id, let origin, let fast): "request fd \(fd) id \(id) -> \(origin) fast \(fast)"
            }
        }
    }

    struct Script: Sendable, CustomTestStringConvertible {
        var name: String
        var steps: [Step]
        var testDescription: String { name }
    }

    static func connection(_ id: UInt64) -> RequestOrigin { .connection(ConnectionID(id)) }

    static let scripts: [Script] = [
        Script(
            name: "a connection's requests: the first after reading events, the next on the fast path",
            steps: [
                .accepted(5), .request(5, a, connection(1)), .request(5, a, connection(1), fast: true),
            ]),
        Script(
            name: "a request before its ACCEPTED was read is credited once the events are read",
            steps: [.accepted(5), .request(5, a, connection(1))]),
        Script(
            name: "the close of a connection ends it; its late message is recognised as closed",
            steps: [
                .accepted(5), .request(5, a, connection(1)), .disconnected(5, closes: [1]),
                .request(5, a, .closed),
            ]),
        Script(
            name: "a reused descriptor is a new connection; the old one's late message is closed",
            steps: [
                .accepted(5), .request(5, a, connection(1)), .disconnected(5, closes: [1]), .accepted(5),
                .request(5, b, connection(2)), .request(5, a, .closed), .request(5, b, connection(2), fast: true),
            ]),
        Script(
            name: "a missed DISCONNECTED: the reused descriptor's ACCEPTED closes the old connection",
            steps: [
                .accepted(5), .request(5, a, connection(1)), .accepted(5, closes: [1]), .request(5, b, connection(2)),
            ]),
        Script(
            name: "a message with an older generated id than the bound one on the same descriptor is closed",
            steps: [.accepted(5), .request(5, b, connection(1)), .request(5, a, .closed)]),
        Script(
            name: "a closed connection's first request read after its descriptor's reuse does not lock out the new one",
            steps: [
                // a sent one request and closed; b was accepted on the same descriptor; both events were read
                // before a's request: it is credited to b's connection, and b's own requests still get through.
                .accepted(5), .disconnected(5, closes: [1]), .accepted(5), .request(5, a, connection(2)),
                .request(5, b, connection(2)), .request(5, b, connection(2), fast: true), .request(5, a, .closed),
            ]),
        Script(
            name: "a client-chosen id different from the bound one on the same descriptor is closed",
            steps: [.accepted(5), .request(5, custom, connection(1)), .request(5, Array("other".utf8), .closed)]),
        Script(
            name: "a descriptor the monitor never reported has closed",
            steps: [.request(7, a, .closed)]),
        Script(
            name: "a transport without descriptors is untracked",
            steps: [.request(-1, a, .untracked, fast: true)]),
        Script(
            name: "a routing id the client chose never takes the fast path, and survives descriptor reuse",
            steps: [
                .accepted(5), .request(5, custom, connection(1)), .request(5, custom, connection(1)),
                .disconnected(5, closes: [1]), .accepted(5), .request(5, custom, connection(2)),
            ]),
        Script(
            name: "a connection that closes before any request is reported closed all the same",
            steps: [.accepted(3), .accepted(4), .disconnected(3, closes: [1]), .request(4, b, connection(2))]),
        Script(
            name: "an unknown DISCONNECTED closes nothing",
            steps: [.disconnected(9), .accepted(9), .request(9, a, connection(1))]),
    ]

    /// Each script's steps give exactly the origins and closes it names.
    @Test(arguments: scripts)
    func script(_ script: Script) {
        var tracker = ConnectionTracker()
        for step in script.steps {
            switch step {
            case .accepted(let fd, let closes):
                #expect(tracker.apply(.accepted(descriptor: fd)).map(\.id.rawValue) == closes, "\(step)")
            case .disconnected(let fd, let closes):
                #expect(tracker.apply(.disconnected(descriptor: fd)).map(\.id.rawValue) == closes, "\(step)")
            case .request(let fd, let id, let origin, let fast):
                if fast {
                    #expect(tracker.knownOrigin(descriptor: fd, routingID: id) == origin, "\(step)")
                } else {
                    #expect(tracker.knownOrigin(descriptor: fd, routingID: id) == nil, "needs events: \(step)")
                    #expect(tracker.origin(descriptor: fd, routingID: id) == origin, "\(step)")
                }
            }
        }
    }

    /// The routing ids of closed connections are remembered up to a bound; past it the oldest are forgotten, and a
    /// late message of a forgotten one on an unknown descriptor is still closed.
    @Test func closedRoutingIDsAreBounded() {
        var tracker = ConnectionTracker(closedRoutingIDMemory: 2)
        let ids: [[UInt8]] = (1...3).map { [0, 0, 0, 0, UInt8($0)] }
        for (index, id) in ids.enumerated() {
            _ = tracker.apply(.accepted(descriptor: 5))
            #expect(tracker.origin(descriptor: 5, routingID: id) == .connection(ConnectionID(UInt64(index + 1))))
            _ = tracker.apply(.disconnected(descriptor: 5))
        }
        _ = tracker.apply(.accepted(descriptor: 5))
        #expect(tracker.origin(descriptor: 5, routingID: ids[2]) == .closed)  // remembered
        // The first is forgotten: on the live descriptor it would be taken for the new connection's first request,
        // which is why the memory is large (65,536) by default; on another descriptor it is closed anyway.
        #expect(tracker.origin(descriptor: 6, routingID: ids[0]) == .closed)
        #expect(tracker.count == 1)
    }
}
