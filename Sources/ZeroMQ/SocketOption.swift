import CZeroMQ

/// The socket options this project sets, each with a value of the right type.
public enum SocketOption: Sendable {
    /// How long unsent messages linger after close, in milliseconds (`ZMQ_LINGER`; 0 drops them).
    case linger(milliseconds: Int32)
    /// Messages queued per peer for sending before the socket drops (PUB, ROUTER) or blocks (`ZMQ_SNDHWM`).
    case sendHighWaterMark(Int32)
    /// Messages queued per peer for receiving (`ZMQ_RCVHWM`).
    case receiveHighWaterMark(Int32)
    /// The largest frame a peer may send; a peer that sends more is disconnected (`ZMQ_MAXMSGSIZE`).
    case maxMessageSize(bytes: Int64)
    /// Pass every subscription up to the XPUB reader, not only the first for each topic (`ZMQ_XPUB_VERBOSE`).
    case xpubVerbose(Bool)
    /// Make an XPUB send fail with `EAGAIN` when a matching subscriber is at its high-water mark, instead of
    /// dropping the message for that subscriber (`ZMQ_XPUB_NODROP`).
    case xpubNoDrop(Bool)
    /// Subscribe a SUB socket to a topic prefix (`ZMQ_SUBSCRIBE`).
    case subscribe([UInt8])
    /// Remove a SUB socket's subscription (`ZMQ_UNSUBSCRIBE`).
    case unsubscribe([UInt8])
    /// Queue messages only to completed connections (`ZMQ_IMMEDIATE`).
    case immediate(Bool)
    /// Milliseconds between ZMTP PINGs on each connection; 0 turns them off (`ZMQ_HEARTBEAT_IVL`).
    case heartbeatInterval(milliseconds: Int32)
    /// Milliseconds without traffic after a PING before the connection is closed (`ZMQ_HEARTBEAT_TIMEOUT`).
    case heartbeatTimeout(milliseconds: Int32)
    /// Milliseconds the peer may go without hearing from this socket after it received a PING before the peer
    /// closes the connection; sent to the peer in each PING, in tenths of a second (`ZMQ_HEARTBEAT_TTL`; values
    /// below 100 have no effect).
    case heartbeatTTL(milliseconds: Int32)
    /// Milliseconds before reconnecting a dropped connection (`ZMQ_RECONNECT_IVL`).
    case reconnectInterval(milliseconds: Int32)
    /// Let a new connection take over a routing id that is already in use (`ZMQ_ROUTER_HANDOVER`).
    case routerHandover(Bool)
    /// The kernel's receive buffer size in bytes, -1 for the OS default (`ZMQ_RCVBUF`).
    case receiveBuffer(bytes: Int32)
    /// How many pending connections the listener queues (`ZMQ_BACKLOG`).
    case backlog(Int32)
    /// Pass subscriptions to the XPUB reader without applying them: the reader applies each with `subscribe`
    /// before it reads the next (`ZMQ_XPUB_MANUAL`).
    case xpubManual(Bool)
    /// Be a CurveZMQ server (`ZMQ_CURVE_SERVER`); the secret key must be set too.
    case curveServer(Bool)
    /// This socket's CurveZMQ secret key, 40 Z85 characters (`ZMQ_CURVE_SECRETKEY`).
    case curveSecretKey(String)
    /// This socket's CurveZMQ public key, 40 Z85 characters (`ZMQ_CURVE_PUBLICKEY`), for a client.
    case curvePublicKey(String)
    /// The public key of the server a CurveZMQ client connects to, 40 Z85 characters (`ZMQ_CURVE_SERVERKEY`).
    case curveServerKey(String)
    /// The ZAP domain this socket's connections are authenticated in (`ZMQ_ZAP_DOMAIN`).
    case zapDomain(String)

    func apply(to handle: UnsafeMutableRawPointer) throws {
        switch self {
        case .linger(let ms): try setInt(handle, ZMQ_LINGER, ms)
        case .sendHighWaterMark(let n): try setInt(handle, ZMQ_SNDHWM, n)
        case .receiveHighWaterMark(let n): try setInt(handle, ZMQ_RCVHWM, n)
        case .maxMessageSize(let bytes):
            var value = bytes
            try zmqCheck("zmq_setsockopt") {
                zmq_setsockopt(handle, ZMQ_MAXMSGSIZE, &value, MemoryLayout<Int64>.size)
            }
        case .xpubVerbose(let on): try setInt(handle, ZMQ_XPUB_VERBOSE, on ? 1 : 0)
        case .xpubNoDrop(let on): try setInt(handle, ZMQ_XPUB_NODROP, on ? 1 : 0)
        case .subscribe(let topic): try setBytes(handle, ZMQ_SUBSCRIBE, topic)
        case .unsubscribe(let topic): try setBytes(handle, ZMQ_UNSUBSCRIBE, topic)
        case .immediate(let on): try setInt(handle, ZMQ_IMMEDIATE, on ? 1 : 0)
        case .heartbeatInterval(let ms): try setInt(handle, ZMQ_HEARTBEAT_IVL, ms)
        case .heartbeatTimeout(let ms): try setInt(handle, ZMQ_HEARTBEAT_TIMEOUT, ms)
        case .heartbeatTTL(let ms): try setInt(handle, ZMQ_HEARTBEAT_TTL, ms)
        case .reconnectInterval(let ms): try setInt(handle, ZMQ_RECONNECT_IVL, ms)
        case .routerHandover(let on): try setInt(handle, ZMQ_ROUTER_HANDOVER, on ? 1 : 0)
        case .receiveBuffer(let bytes): try setInt(handle, ZMQ_RCVBUF, bytes)
        case .backlog(let n): try setInt(handle, ZMQ_BACKLOG, n)
        case .xpubManual(let on): try setInt(handle, ZMQ_XPUB_MANUAL, on ? 1 : 0)
        case .curveServer(let on): try setInt(handle, ZMQ_CURVE_SERVER, on ? 1 : 0)
        case .curveSecretKey(let z85): try setBytes(handle, ZMQ_CURVE_SECRETKEY, Array(z85.utf8))
        case .curvePublicKey(let z85): try setBytes(handle, ZMQ_CURVE_PUBLICKEY, Array(z85.utf8))
        case .curveServerKey(let z85): try setBytes(handle, ZMQ_CURVE_SERVERKEY, Array(z85.utf8))
        case .zapDomain(let domain): try setBytes(handle, ZMQ_ZAP_DOMAIN, Array(domain.utf8))
        }
    }
}

private func setInt(_ handle: UnsafeMutableRawPointer, _ name: Int32, _ value: Int32) throws {
    var value = value
    try zmqCheck("zmq_setsockopt") { zmq_setsockopt(handle, name, &value, MemoryLayout<Int32>.size) }
}

private func setBytes(_ handle: UnsafeMutableRawPointer, _ name: Int32, _ bytes: [UInt8]) throws {
    _ = try bytes.withUnsafeBytes { (raw) throws in
        try zmqCheck("zmq_setsockopt") { zmq_setsockopt(handle, name, raw.baseAddress, raw.count) }
    }
}
