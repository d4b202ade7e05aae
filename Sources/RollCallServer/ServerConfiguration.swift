import RollCallBroker
import RollCallOperations
import RollCallWebhooks

/// Everything a RollCall server runs, validated: the broker (and through it the WebSocket door's and the cluster
/// node's settings), and the operations endpoint if any. ``RollCallServer`` turns it into running services.
public struct ServerConfiguration: Sendable {
    public var broker: BrokerConfiguration
    /// The operations endpoint (metrics, health, readiness, status page); `nil` leaves it off.
    public var operations: OperationsSettings?
    /// Webhook delivery (settings and secret), `nil` without `--webhook-url`.
    public var webhooks: WebhookConfiguration?

    public init(
        broker: BrokerConfiguration = BrokerConfiguration(), operations: OperationsSettings? = nil,
        webhooks: WebhookConfiguration? = nil
    ) {
        self.broker = broker
        self.operations = operations
        self.webhooks = webhooks
    }

    /// Checks every setting's range and the rules across settings, as `rollcall serve` does at start.
    public func validate() throws(ConfigurationError) {
        try broker.validate()
        _ = try operations?.validated()
        do {
            try webhooks?.settings.validate()
        } catch {
            throw ConfigurationError(error.setting, error.message)
        }
    }
}
