import RollCallBroker
import RollCallOperations

/// Everything a RollCall server runs, validated: the broker (and through it the WebSocket door's and the cluster
/// node's settings), and the operations endpoint if any. ``RollCallServer`` turns it into running services.
public struct ServerConfiguration: Sendable {
    public var broker: BrokerConfiguration
    /// The operations endpoint (metrics, health, readiness, status page); `nil` leaves it off.
    public var operations: OperationsSettings?

    public init(broker: BrokerConfiguration = BrokerConfiguration(), operations: OperationsSettings? = nil) {
        self.broker = broker
        self.operations = operations
    }

    /// Checks every setting's range and the rules across settings, as `rollcall serve` does at start.
    public func validate() throws(ConfigurationError) {
        try broker.validate()
        _ = try operations?.validated()
    }
}
