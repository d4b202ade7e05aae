import Testing

@testable import RollCallBroker

/// Which hosts count as loopback for the security checks at start (an open WebSocket door, a JWKS URL over http).
@Suite struct LoopbackHostTests {
    @Test(arguments: ["localhost", "::1", "127.0.0.1", "127.1.2.3", "127.255.255.255"])
    func loopback(host: String) {
        #expect(WebSocketSettings.isLoopback(host))
    }

    /// Names that merely start like a loopback address resolve wherever their owner says; malformed addresses and
    /// other networks are not loopback either.
    @Test(arguments: [
        "127.0.0.1.evil.example", "127.evil.example", "127.0.0", "127.0.0.1.", "127..0.1", "127.0.0.256",
        "127.0.0.0001", "0.0.0.0", "10.0.0.1", "example.com", "", "127.0.0.-1", "::",
    ])
    func notLoopback(host: String) {
        #expect(!WebSocketSettings.isLoopback(host))
    }
}
