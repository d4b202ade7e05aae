import ArgumentParser
import Foundation
import RollCallWebhooks

/// The webhook settings' defaults, written once in ``WebhookSettings``.
private let webhookDefaults = WebhookSettings()

/// `rollcall serve`'s webhook options (docs/webhooks.md).
struct WebhookOptions: ParsableArguments {
    @Option(
        help:
            "POST every presence transition to this http(s) URL, signed (Standard Webhooks); repeat it for several. Env: ROLLCALL_WEBHOOK_URL (a comma list). Default: none."
    )
    var webhookUrl: [String] = []

    @Option(
        help:
            "File holding the whsec_ secret that signs webhooks (required with --webhook-url). Env: ROLLCALL_WEBHOOK_SECRET_FILE."
    )
    var webhookSecretFile: String?

    @Option(
        help:
            "One webhook POST's whole time, ms; longer is retried. Env: ROLLCALL_WEBHOOK_TIMEOUT_MS. Default: \(webhookDefaults.timeoutMilliseconds)."
    )
    var webhookTimeoutMs: Int64?

    @Option(
        help:
            "A failing batch is retried (backoff 1 s doubling to 5 min) at least this long, then skipped. Env: ROLLCALL_WEBHOOK_RETRY_HOURS. Default: \(webhookDefaults.retryHours)."
    )
    var webhookRetryHours: Int64?

    @Option(
        help:
            "Events in one webhook POST at most. Env: ROLLCALL_WEBHOOK_BATCH_MAX. Default: \(webhookDefaults.batchMax)."
    )
    var webhookBatchMax: Int?

    @Option(
        help:
            "A webhook batch goes this long after its first event if not full, ms. Env: ROLLCALL_WEBHOOK_BATCH_MS. Default: \(webhookDefaults.batchMilliseconds)."
    )
    var webhookBatchMs: Int64?

    @Option(
        help:
            "Send presence.offline_for for a user offline this long, ms. Env: ROLLCALL_WEBHOOK_OFFLINE_AFTER_MS. Default: off."
    )
    var webhookOfflineAfterMs: Int64?

    /// The settings, each from its flag, else its environment variable, else its default; and the secret file.
    func settings() throws -> (settings: WebhookSettings, secretFile: String?) {
        let environment = ProcessInfo.processInfo.environment
        var s = WebhookSettings()
        if !webhookUrl.isEmpty {
            s.urls = webhookUrl
        } else if let list = environment["ROLLCALL_WEBHOOK_URL"], !list.isEmpty {
            s.urls = list.split(separator: ",", omittingEmptySubsequences: false)
                .map { $0.trimmingCharacters(in: .whitespaces) }
            guard !s.urls.contains(where: \.isEmpty) else {
                throw ValidationError("ROLLCALL_WEBHOOK_URL=\(list) has an empty URL")
            }
        }
        s.timeoutMilliseconds = try setting(
            webhookTimeoutMs, "ROLLCALL_WEBHOOK_TIMEOUT_MS", default: s.timeoutMilliseconds)
        s.retryHours = try setting(webhookRetryHours, "ROLLCALL_WEBHOOK_RETRY_HOURS", default: s.retryHours)
        s.batchMax = try setting(webhookBatchMax, "ROLLCALL_WEBHOOK_BATCH_MAX", default: s.batchMax)
        s.batchMilliseconds = try setting(webhookBatchMs, "ROLLCALL_WEBHOOK_BATCH_MS", default: s.batchMilliseconds)
        if let offline = webhookOfflineAfterMs {
            s.offlineAfterMilliseconds = offline
        } else if let text = environment["ROLLCALL_WEBHOOK_OFFLINE_AFTER_MS"], !text.isEmpty {
            s.offlineAfterMilliseconds = try parseSetting(text, "ROLLCALL_WEBHOOK_OFFLINE_AFTER_MS")
        }
        let secret = webhookSecretFile ?? environment["ROLLCALL_WEBHOOK_SECRET_FILE"].flatMap { $0.isEmpty ? nil : $0 }
        return (s, secret)
    }
}
