import RollCallSecurity
import Synchronization
import ZeroMQ

/// The CurveZMQ keys a client needs with a broker that runs CURVE (docs/security.md): the broker's public key, and
/// the client's own key pair, whose public key the broker's authorized-keys file lists with a role.
public struct CurveCredentials: Sendable, Equatable {
    /// The broker's public key, 40 Z85 characters (`rollcall serve` logs it at start).
    public var serverKey: String
    public var publicKey: String
    public var secretKey: String

    public init(serverKey: String, publicKey: String, secretKey: String) {
        self.serverKey = serverKey
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// The broker's key and the client's key pair from a certificate file (`rollcall keygen`, or czmq's format).
    public init(serverKey: String, keyFile: String) throws {
        guard CurveKey(serverKey) != nil else {
            throw CredentialsError("the server key must be 40 Z85 characters, not \(serverKey.count) characters")
        }
        let certificate: Certificate
        do {
            certificate = try CertificateFile.read(keyFile)
        } catch {
            throw CredentialsError("\(error)")
        }
        guard let secret = certificate.secretKey else {
            throw CredentialsError("\(keyFile) is a public certificate: a client needs its secret key too")
        }
        self.init(serverKey: serverKey, publicKey: certificate.publicKey.z85, secretKey: secret.z85)
    }

    /// Makes `socket` a CURVE client of the broker; before it connects.
    public func apply(to socket: Socket) throws {
        try socket.set(.curveServerKey(serverKey))
        try socket.set(.curvePublicKey(publicKey))
        try socket.set(.curveSecretKey(secretKey))
    }
}

/// Why credentials cannot be made.
public struct CredentialsError: Error, Equatable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// Watches a CURVE client socket's handshakes: libzmq tells a client that the broker refused its key only through
/// the socket monitor (libzmq#3505), so a call that gets no answer asks this why. Asked to, it also notes a
/// connection that ended, for a session that moves to another node at once when its node's process dies.
///
/// ``close()`` it before closing the socket: it stops the monitor first (see `Socket.stopMonitor()`).
final class HandshakeWatch {
    /// The monitor's PAIR socket, readable when a handshake or disconnection event waits: for a poller.
    let monitor: Socket
    /// The last failure seen, kept until a handshake succeeds.
    private var failure: MonitorEvent.Kind?
    /// Whether a connection ended since ``takeDisconnection()`` was last called.
    private var disconnected = false
    private let curve: Bool
    private let socket: Socket

    /// Watches `socket`'s handshakes, and with `disconnections` the end of its connections.
    init(_ socket: Socket, curve: Bool, context: Context, disconnections: Bool = false) throws {
        self.curve = curve
        self.socket = socket
        let name = "handshake-\(Self.instances.add(1, ordering: .relaxed).newValue)"
        monitor = try socket.monitor(
            disconnections
                ? [.handshakeSucceeded, .handshakeFailed, .disconnected] : [.handshakeSucceeded, .handshakeFailed],
            name: name, context: context)
    }

    private static let instances = Atomic<Int>(0)

    /// Why the broker would not talk to this client, if a handshake failed since the last that succeeded.
    func refusal() -> ClientError? {
        drain()
        switch failure {
        case .handshakeFailedAuth?:
            return .refused("the broker refused this key: it is not in the broker's authorized keys")
        case .handshakeFailedProtocol?, .handshakeFailedNoDetail?:
            return .refused(
                curve
                    ? "the CURVE handshake failed: is the server key right, and does the broker run CURVE?"
                    : "the handshake failed: the broker runs CURVE; give --server-key and --key-file")
        default:
            return nil
        }
    }

    /// Whether a connection ended since the last call (or since the watch began).
    func takeDisconnection() -> Bool {
        drain()
        defer { disconnected = false }
        return disconnected
    }

    private func drain() {
        while let event = try? monitor.receiveMonitorEvent() {
            switch event.kind {
            case .disconnected: disconnected = true
            case .handshakeSucceeded: failure = nil
            default: failure = event.kind
            }
        }
    }

    /// Stops the monitor, then closes its reader: in that order, so that libzmq never sends an event to a reader
    /// that is gone (which would block its I/O thread for good).
    func close() {
        try? socket.stopMonitor()
        monitor.close()
    }
}
