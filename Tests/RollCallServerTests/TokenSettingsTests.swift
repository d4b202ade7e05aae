import RollCallBroker
import RollCallServer
import Testing

/// `--jwt-jwks-url` and `--jwt-max-lifetime-s` as the assembly checks them at start, without starting anything.
@Suite struct TokenSettingsTests {
    static func options(jwksURL: String?, insecure: Bool = false, maxLifetime: Int64? = nil) -> ServeOptions {
        var options = ServeOptions()
        options.ephemeral = true
        options.broker.insecure = insecure
        options.broker.webSocket.endpoint = "127.0.0.1:0"
        options.broker.webSocket.jwtJwksURL = jwksURL
        if let maxLifetime { options.broker.webSocket.jwtMaxLifetimeSeconds = maxLifetime }
        return options
    }

    /// An https URL, or http to a loopback host, is taken; another scheme, no host, or plain http elsewhere (keys
    /// anyone on the way could replace) is refused, naming the flag; `--insecure` takes plain http anywhere.
    @Test(arguments: [
        ("https://idp.example.com/.well-known/jwks.json", false, true),
        ("HTTPS://tenant.auth0.com/.well-known/jwks.json", false, true),
        ("http://127.0.0.1:8080/jwks", false, true), ("http://localhost/jwks", false, true),
        ("http://[::1]:8080/jwks", false, true), ("http://idp.example.com/jwks", false, false),
        ("http://idp.example.com/jwks", true, true), ("http://127.0.0.1.evil.example/jwks", false, false),
        ("ftp://idp.example.com/jwks", false, false), ("file:///etc/jwks.json", false, false),
        ("idp.example.com/jwks", false, false), ("https://", false, false), ("https:///jwks", false, false),
        ("https://idp.example.com/jw ks", false, false),
    ])
    func jwksURL(url: String, insecure: Bool, accepted: Bool) {
        do {
            _ = try Self.options(jwksURL: url, insecure: insecure).configuration()
            #expect(accepted, "\(url) was taken")
        } catch {
            #expect(!accepted, "\(url): \(error)")
            #expect(error.setting == "--jwt-jwks-url")
        }
    }

    /// The longest lifetime is 60 s to a year; 24 h by default; there is no "unlimited" (0).
    @Test func maxLifetimeRange() throws {
        #expect(try Self.options(jwksURL: nil).configuration().broker.webSocket.jwtMaxLifetimeSeconds == 86_400)
        for seconds: Int64 in [60, 3_600, 31_536_000] {
            #expect(throws: Never.self) { try Self.options(jwksURL: nil, maxLifetime: seconds).configuration() }
        }
        for seconds: Int64 in [0, -1, 59, 31_536_001] {
            #expect(throws: ConfigurationError.self) {
                try Self.options(jwksURL: nil, maxLifetime: seconds).configuration()
            }
        }
    }

    /// A JWKS URL alone is enough for a non-loopback endpoint (with TLS); with neither it nor a key file the start
    /// is refused, naming both.
    @Test func aJWKSURLIsEnoughOutsideLoopback() throws {
        var options = Self.options(jwksURL: "https://idp.example.com/jwks")
        options.broker.webSocket.endpoint = "0.0.0.0:443"
        options.broker.webSocket.tlsCertFile = "/etc/rollcall/ws.crt"
        options.broker.webSocket.tlsKeyFile = "/etc/rollcall/ws.key"
        #expect(throws: Never.self) { try options.configuration() }
        options.broker.webSocket.jwtJwksURL = nil
        do {
            _ = try options.configuration()
            Issue.record("a non-loopback endpoint without keys was taken")
        } catch {
            #expect(error.message.contains("--jwt-key-file or --jwt-jwks-url"), "\(error)")
        }
    }
}
