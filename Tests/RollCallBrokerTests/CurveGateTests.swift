import RollCallCore
import RollCallSecurity
import Testing
import ZeroMQ

@testable import RollCallBroker

/// ZAP answers and access from the authorized-keys table, without a socket or a handshake.
@Suite("CURVE gate")
struct CurveGateTests {
    /// A key's 32 bytes as a ZAP request carries them, and its Z85 text as the table knows it.
    static func key(_ seed: UInt8) -> (bytes: [UInt8], key: CurveKey) {
        let bytes = (0..<32).map { UInt8(truncatingIfNeeded: Int($0) &* 7 &+ Int(seed)) }
        return (bytes, CurveKey(Curve.z85(bytes)!)!)
    }

    static func request(mechanism: String = "CURVE", credentials: [UInt8]) -> [[UInt8]] {
        [Array("1.0".utf8), Array("7".utf8), [], Array("127.0.0.1".utf8), [], Array(mechanism.utf8), credentials]
    }

    static func status(_ answer: CurveGate.ZapAnswer) -> String { String(decoding: answer.reply[2], as: UTF8.self) }

    /// A known key is accepted with its Z85 text as the `User-Id`, and the request id echoed.
    @Test func knownKeyIsAccepted() {
        let alice = Self.key(1)
        var gate = CurveGate(keys: AuthorizedKeys(roles: [alice.key: .user("alice".id)]))
        let answer = gate.zapReply(to: Self.request(credentials: alice.bytes))
        #expect(Self.status(answer) == "200")
        #expect(answer.refusal == nil)
        #expect(answer.reply[1] == Array("7".utf8))
        #expect(String(decoding: answer.reply[4], as: UTF8.self) == alice.key.z85)
        #expect(gate.access(userID: alice.key.z85) == .role(.user("alice".id)))
    }

    /// An unknown key, another mechanism or a short key is refused with 400; a request that is not ZAP 1.0, 500.
    @Test func everythingElseIsRefused() {
        var gate = CurveGate(keys: AuthorizedKeys(roles: [Self.key(1).key: .operator]))
        let unknown = gate.zapReply(to: Self.request(credentials: Self.key(2).bytes))
        #expect(Self.status(unknown) == "400")
        #expect(unknown.refusal?.contains("not authorized") == true)
        #expect(
            Self.status(gate.zapReply(to: Self.request(mechanism: "PLAIN", credentials: Self.key(1).bytes))) == "400")
        #expect(Self.status(gate.zapReply(to: Self.request(credentials: [1, 2, 3]))) == "400")
        let malformed = gate.zapReply(to: [Array("2.0".utf8), Array("9".utf8)])
        #expect(Self.status(malformed) == "500")
        #expect(malformed.reply[1] == Array("9".utf8))
    }

    /// A key removed by a reload loses everything on its next message; the counts of the change are reported.
    @Test func reloadRevokesARemovedKey() {
        let (alice, bob) = (Self.key(1), Self.key(2))
        var gate = CurveGate(keys: AuthorizedKeys(roles: [alice.key: .operator]))
        let change = gate.replace(with: AuthorizedKeys(roles: [bob.key: .reader]))
        #expect(change?.added == 1)
        #expect(change?.removed == [alice.key])
        #expect(gate.access(userID: alice.key.z85) == .revoked)
        #expect(gate.access(userID: bob.key.z85) == .role(.reader))
        #expect(gate.access(userID: nil) == .revoked)
        #expect(Self.status(gate.zapReply(to: Self.request(credentials: alice.bytes))) == "400")
    }

    /// Without CURVE every peer may do everything, and a table is not taken.
    @Test func withoutCurveEverythingIsOpen() {
        var gate = CurveGate(keys: nil)
        #expect(gate.access(userID: nil) == .open)
        #expect(gate.replace(with: AuthorizedKeys()) == nil)
        #expect(gate.keys == nil)
    }
}
