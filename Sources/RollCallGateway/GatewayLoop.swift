import RollCallBroker
import RollCallSecurity
import RollCallWire

/// What the WebSocket door asks of the broker's event loop: ``BrokerGateway`` in the broker, a recording fake in the
/// handler's tests (so that a connection is tested on an `EmbeddedChannel` without a broker).
protocol GatewayLoop: Sendable {
    /// The broker's settings: requests are decoded with the loop's limits.
    var configuration: BrokerConfiguration { get }
    /// The test-mode clock, which the door's pings follow; `nil` on the real clock.
    var testClock: TestClockSignal? { get }
    func open(access: Access, outbox: GatewayOutbox)
    func handle(_ request: Result<GatewayRequest, RequestRejection>, from outbox: GatewayOutbox)
    func reauthorize(_ outbox: GatewayOutbox, access: Access, id: JSON?, expires: Int64)
    func revoke(_ outbox: GatewayOutbox)
    func closed(_ outbox: GatewayOutbox)
}

extension BrokerGateway: GatewayLoop {}
