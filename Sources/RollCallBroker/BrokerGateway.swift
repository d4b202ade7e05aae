import RollCallCore
import RollCallSecurity
import RollCallWire

/// The event loop's door for the WebSocket gateway (RollCallGateway), which runs on its own threads and never
/// touches the core: it posts what its connections do through the loop's mailbox, which wakes the loop, and takes
/// replies and updates back through each connection's ``GatewayOutbox``. Jobs run in the order they were posted, so
/// a connection's requests are answered in order, and its close comes after its last request.
public struct BrokerGateway: Sendable {
    let mailbox: LoopMailbox
    /// The broker's settings: the gateway decodes requests with the same limits as the loop.
    public let configuration: BrokerConfiguration

    /// Registers a new WebSocket connection with what it may do (`nil`: everything, no tokens configured); returns
    /// the fresh ``ConnectionID`` the loop gave it, or `nil` if the loop did not answer within `timeout` (stopping).
    public func open(role: Role?, outbox: GatewayOutbox, timeout: Duration = .seconds(2)) async -> ConnectionID? {
        let answer = OneAnswer<ConnectionID>()
        return await withCheckedContinuation { (continuation: CheckedContinuation<ConnectionID?, Never>) in
            answer.wait(continuation)
            mailbox.post { loop in
                let id = loop.openGatewayConnection(role: role, outbox: outbox)
                answer.give(id)
            }
            Task {
                try? await Task.sleep(for: timeout)
                answer.give(nil)
            }
        }
    }

    /// Hands one decoded frame (or why it could not be decoded) to the loop; call ``GatewayOutbox/beginRequest()``
    /// first. The reply comes through the connection's outbox.
    public func handle(_ request: Result<GatewayRequest, RequestRejection>, from connection: ConnectionID) {
        mailbox.post { loop in loop.handleGatewayRequest(request, from: connection) }
    }

    /// A fresh token was accepted for the connection (`auth`): from now on it may do what `role` allows. The loop
    /// answers the request with `expires`.
    public func reauthorize(_ connection: ConnectionID, role: Role?, id: JSON?, expires: Int64) {
        mailbox.post { loop in loop.reauthorizeGatewayConnection(connection, role: role, id: id, expires: expires) }
    }

    /// The connection closed (either side, TCP gone, ping unanswered, token expired): its subscriptions go, and its
    /// sessions end by the close path (at once, or after the grace period).
    public func closed(_ connection: ConnectionID) {
        mailbox.post { loop in loop.dropGatewayConnection(connection) }
    }
}

extension Broker {
    /// The door for a WebSocket front door.
    public var gateway: BrokerGateway { BrokerGateway(mailbox: mailbox, configuration: configuration) }
}
