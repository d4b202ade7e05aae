import Foundation

/// The webhook flags of `rollcall serve` (docs/webhooks.md), with their defaults and documented ranges.
public struct WebhookSettings: Equatable, Sendable {
    /// `--webhook-url`: where the log is POSTed, each URL with its own cursor; none turns delivery off.
    public var urls: [String] = []
    /// `--webhook-timeout-ms`: one POST's whole time, connection included; longer is a failure, retried.
    public var timeoutMilliseconds: Int64 = 10_000
    /// `--webhook-retry-hours`: a batch is retried at least this long after its first attempt, then skipped.
    public var retryHours: Int64 = 24
    /// `--webhook-batch-max`: the most events in one POST.
    public var batchMax = 100
    /// `--webhook-batch-ms`: a batch is sent this long after its first event arrived if it has not filled; also
    /// how often the log is polled when no notification comes.
    public var batchMilliseconds: Int64 = 50
    /// `--webhook-offline-after-ms`: `presence.offline_for` after this long offline; `nil` sends none.
    public var offlineAfterMilliseconds: Int64?

    public init() {}

    /// The documented range of each setting.
    public enum Range {
        public static let timeoutMilliseconds: ClosedRange<Int64> = 1...3_600_000
        public static let retryHours: ClosedRange<Int64> = 1...720
        public static let batchMax: ClosedRange<Int> = 1...10_000
        public static let batchMilliseconds: ClosedRange<Int64> = 1...60_000
        public static let offlineAfterMilliseconds: ClosedRange<Int64> = 1...86_400_000
    }

    /// A setting out of its range or a URL that cannot be used: the flag at fault and why.
    public struct Invalid: Error, Equatable, Sendable, CustomStringConvertible {
        public var setting: String
        public var message: String
        public var description: String { "\(setting) \(message)" }

        public init(_ setting: String, _ message: String) {
            self.setting = setting
            self.message = message
        }
    }

    /// Checks every URL and every range; the first fault is thrown.
    public func validate() throws(Invalid) {
        var seen = Set<String>()
        for url in urls {
            try Self.check(url: url)
            guard seen.insert(url).inserted else {
                throw Invalid("--webhook-url", "\(url) is given twice: each URL has one cursor")
            }
        }
        try Self.check(timeoutMilliseconds, in: Range.timeoutMilliseconds, "--webhook-timeout-ms")
        try Self.check(retryHours, in: Range.retryHours, "--webhook-retry-hours")
        try Self.check(batchMax, in: Range.batchMax, "--webhook-batch-max")
        try Self.check(batchMilliseconds, in: Range.batchMilliseconds, "--webhook-batch-ms")
        if let offline = offlineAfterMilliseconds {
            try Self.check(offline, in: Range.offlineAfterMilliseconds, "--webhook-offline-after-ms")
        }
    }

    /// An `http://` or `https://` URL with a host.
    static func check(url text: String) throws(Invalid) {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased() else {
            throw Invalid("--webhook-url", "'\(text)' is not a URL")
        }
        guard scheme == "http" || scheme == "https" else {
            throw Invalid("--webhook-url", "'\(text)' must be http:// or https://, not \(scheme)://")
        }
        guard let host = url.host, !host.isEmpty else {
            throw Invalid("--webhook-url", "'\(text)' names no host")
        }
    }

    private static func check<T: Comparable>(_ value: T, in range: ClosedRange<T>, _ setting: String) throws(Invalid) {
        guard range.contains(value) else {
            throw Invalid(setting, "must be in \(range.lowerBound)...\(range.upperBound), not \(value)")
        }
    }

    /// The machine's settings these flags describe.
    public var policy: DeliveryPolicy {
        .init(
            batchMax: batchMax, batchWindow: .milliseconds(batchMilliseconds), retryWindow: .seconds(retryHours * 3600))
    }
}

/// Webhook delivery, ready to start: the settings validated and the secret read.
public struct WebhookConfiguration: Sendable {
    public var settings: WebhookSettings
    public var signer: StandardWebhookSigner

    public init(settings: WebhookSettings, signer: StandardWebhookSigner) {
        self.settings = settings
        self.signer = signer
    }

    /// Reads `--webhook-secret-file`: one `whsec_` secret (white space around it ignored).
    public static func readSecret(path: String) throws(WebhookSettings.Invalid) -> StandardWebhookSigner {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw .init("--webhook-secret-file", "\(path) cannot be read: \(error.localizedDescription)")
        }
        do {
            return try StandardWebhookSigner(secret: text)
        } catch {
            throw .init("--webhook-secret-file", "\(path) \(error)")
        }
    }
}
