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
    /// The test-mode clock, which the door's pings follow in `--test-mode`; `nil` on the real clock.
    public let testClock: TestClockSignal?

    /// Registers a new WebSocket connection with what it may do (`.open` when no tokens are configured). The loop
    /// gives it a fresh ``ConnectionID`` from the same count as the command endpoint's; the connection's later jobs,
    /// posted after this one, find it through `outbox`.
    public func open(access: Access, outbox: GatewayOutbox) {
        mailbox.post { loop in
            let id = loop.commands.issueConnectionID()
            loop.webSockets.open(id, access: access, outbox: outbox)
            outbox.connection = id
        }
    }

    /// Hands one decoded frame (or why it could not be decoded) to the loop; count it with
    /// ``GatewayOutbox/beginRequest()`` first. The reply comes through the connection's outbox.
    public func handle(_ request: Result<GatewayRequest, RequestRejection>, from outbox: GatewayOutbox) {
        mailbox.post { loop in
            // Closed meanwhile: nobody reads the answer. Else answered at once, or in its turn in the one fair queue.
            guard let id = outbox.connection, loop.webSockets.access(of: id) != nil else { return }
            loop.requests.take(
                .gateway(request), body: [], key: .webSocket(id), route: .webSocket(id), answer: loop.answer)
        }
    }

    /// A fresh token was accepted for the connection (`auth`): from now on it may do what `access` allows. The
    /// loop answers the request with `expires`.
    public func reauthorize(_ outbox: GatewayOutbox, access: Access, id: JSON?, expires: Int64) {
        mailbox.post { loop in
            guard let connection = outbox.connection else { return }
            loop.webSockets.reauthorize(connection, access: access, requestID: id, expires: expires)
        }
    }

    /// The key that checked the connection's token was taken away by a reload: its sessions end, reason `revoked`,
    /// and the loop closes it with 4003 (``GatewayCloseCode/tokenRevoked``).
    public func revoke(_ outbox: GatewayOutbox) {
        mailbox.post { loop in
            guard let id = outbox.connection else { return }
            loop.closeGatewayConnection(id, revoked: true)
        }
    }

    /// The connection closed (either side, TCP gone, ping unanswered, token expired): its subscriptions go, and its
    /// sessions end by the close path (at once, or after the grace period).
    public func closed(_ outbox: GatewayOutbox) {
        mailbox.post { loop in
            guard let id = outbox.connection else { return }
            loop.closeGatewayConnection(id)
        }
    }
}

extension Broker {
    /// The door for a WebSocket front door.
    public var gateway: BrokerGateway {
        BrokerGateway(mailbox: mailbox, configuration: configuration, testClock: testClock)
    }
}
