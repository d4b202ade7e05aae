import Foundation
import RollCallBroker
import RollCallServer
import RollCallWebhooks
import Testing

/// `rollcall serve`'s webhook settings, as the assembly checks them, without starting anything.
@Suite struct WebhookSettingsTests {
    static let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    /// A secret file in a fresh temporary directory, removed after `body`.
    @discardableResult
    static func withSecretFile<T>(_ text: String, _ body: (String) throws -> T) throws -> T {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("webhooks-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("secret").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return try body(path)
    }

    static func options(urls: [String], secretFile: String?) -> ServeOptions {
        var options = ServeOptions()
        options.dataDirectory = "/var/lib/rollcall"  // not touched: nothing starts
        options.webhooks.urls = urls
        options.webhookSecretFile = secretFile
        return options
    }

    /// Without a URL delivery is off; with one and a secret file, the settings keep their defaults and the
    /// secret is read (a trailing newline is fine).
    @Test func urlAndSecretFile() throws {
        #expect(try ServeOptions().configuration().webhooks == nil)
        try Self.withSecretFile(Self.secret + "\n") { path in
            let configuration = try Self.options(urls: ["https://app.example/hooks"], secretFile: path).configuration()
            let webhooks = try #require(configuration.webhooks)
            #expect(webhooks.settings.urls == ["https://app.example/hooks"])
            #expect(webhooks.settings.timeoutMilliseconds == 10_000)
            #expect(webhooks.settings.retryHours == 24)
            #expect(webhooks.settings.batchMax == 100)
            #expect(webhooks.settings.batchMilliseconds == 50)
            #expect(webhooks.settings.offlineAfterMilliseconds == nil)
        }
    }

    /// A URL needs a secret file, and a secret file needs a URL.
    @Test func secretFileAndURLGoTogether() {
        #expect(throws: ConfigurationError.self) {
            try Self.options(urls: ["http://127.0.0.1:9000/hook"], secretFile: nil).configuration()
        }
        #expect(throws: ConfigurationError.self) { try Self.options(urls: [], secretFile: "/tmp/x").configuration() }
    }

    /// Delivery needs the presence log: a broker that keeps nothing, or no history, is refused.
    @Test func needsThePresenceLog() throws {
        try Self.withSecretFile(Self.secret) { path in
            var ephemeral = Self.options(urls: ["http://127.0.0.1:9000/hook"], secretFile: path)
            ephemeral.dataDirectory = nil
            ephemeral.ephemeral = true
            var noHistory = Self.options(urls: ["http://127.0.0.1:9000/hook"], secretFile: path)
            noHistory.broker.historyRetentionMilliseconds = 0
            for options in [ephemeral, noHistory] {
                #expect {
                    try options.configuration()
                } throws: { error in
                    (error as? ConfigurationError)?.setting == "--webhook-url" && "\(error)".contains("presence log")
                }
            }
        }
    }

    /// A secret file that is missing, or holds no whsec_ secret, is refused with a message that names it.
    @Test func badSecretFiles() throws {
        let missing = Self.options(urls: ["http://127.0.0.1:9000/hook"], secretFile: "/nonexistent/secret")
        #expect {
            try missing.configuration()
        } throws: { error in
            (error as? ConfigurationError)?.setting == "--webhook-secret-file"
                && "\(error)".contains("/nonexistent/secret")
        }
        for text in ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_***", "whsec_c2hvcnQ="] {
            try Self.withSecretFile(text) { path in
                #expect(throws: ConfigurationError.self, "\(text)") {
                    try Self.options(urls: ["http://127.0.0.1:9000/hook"], secretFile: path).configuration()
                }
            }
        }
    }

    /// URLs that are not http(s) with a host, a URL given twice, and values out of range are refused, each
    /// naming its flag.
    @Test(arguments: [
        (["ftp://example.com/x"], "--webhook-url"), (["example.com/hook"], "--webhook-url"),
        (["http:///hook"], "--webhook-url"), (["http://a/h", "http://a/h"], "--webhook-url"),
    ])
    func badURLs(urls: [String], setting: String) throws {
        try Self.withSecretFile(Self.secret) { path in
            #expect {
                try Self.options(urls: urls, secretFile: path).configuration()
            } throws: { error in
                (error as? ConfigurationError)?.setting == setting
            }
        }
    }

    /// Zero or negative values, and values past their range, are refused naming their flag.
    @Test func outOfRangeValues() throws {
        try Self.withSecretFile(Self.secret) { path in
            let changes: [(String, (inout WebhookSettings) -> Void)] = [
                ("--webhook-timeout-ms", { $0.timeoutMilliseconds = 0 }),
                ("--webhook-retry-hours", { $0.retryHours = -1 }),
                ("--webhook-batch-max", { $0.batchMax = 0 }),
                ("--webhook-batch-ms", { $0.batchMilliseconds = 0 }),
                ("--webhook-offline-after-ms", { $0.offlineAfterMilliseconds = 0 }),
                ("--webhook-batch-max", { $0.batchMax = 1_000_000 }),
            ]
            for (setting, change) in changes {
                var options = Self.options(urls: ["http://127.0.0.1:9000/hook"], secretFile: path)
                change(&options.webhooks)
                #expect(throws: ConfigurationError.self, "\(setting)") { try options.configuration() }
                #expect {
                    try options.configuration()
                } throws: { error in
                    (error as? ConfigurationError)?.setting == setting
                }
            }
        }
    }
}
