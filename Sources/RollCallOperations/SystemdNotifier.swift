import Foundation
import Logging
import RollCallBroker
import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#endif

/// systemd's notify protocol (sd_notify(3)): `READY=1` once the broker serves, `WATCHDOG=1` every half
/// `WATCHDOG_USEC` while its loop turns, and `STOPPING=1` when shutdown begins. Datagrams to `NOTIFY_SOCKET`, a
/// path or an abstract name (`@...`); without that variable it does nothing.
public struct SystemdNotifier: Service {
    private let socketPath: String
    private let watchdogMicroseconds: Int64?
    private let broker: Broker
    private let logger: Logger

    /// A notifier from the environment systemd sets, or `nil` when the broker does not run under systemd's notify.
    public init?(environment: [String: String], broker: Broker, logger: Logger) {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty else { return nil }
        socketPath = path
        watchdogMicroseconds = environment["WATCHDOG_USEC"].flatMap { Int64($0) }.flatMap { $0 > 0 ? $0 : nil }
        self.broker = broker
        self.logger = logger
    }

    public func run() async throws {
        // Ready once the loop turns: state is restored and both endpoints are bound before it starts.
        while !broker.isRunning {
            try await Task.sleep(for: .milliseconds(5))
        }
        send("READY=1\nSTATUS=serving \(broker.commandEndpoint) and \(broker.updateEndpoint)")
        await withGracefulShutdownHandler {
            guard let interval = watchdogMicroseconds else {
                try? await gracefulShutdown()
                return
            }
            let half = Duration.microseconds(interval / 2)
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                // A loop that has stalled past the health bound gets no ping: systemd restarts the broker.
                if let since = broker.millisecondsSinceLastRound, since <= OperationsServer.stallMilliseconds {
                    send("WATCHDOG=1")
                } else {
                    logger.warning("event loop stalled: no watchdog ping to systemd")
                }
                try? await Task.sleep(for: half)
            }
        } onGracefulShutdown: {
            send("STOPPING=1")
        }
    }

    /// Sends one datagram; a failure is logged, never fatal.
    func send(_ message: String) {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else {
            logger.error("systemd notify: no socket", metadata: ["errno": "\(errno)"])
            return
        }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var path = Array(socketPath.utf8)
        if path.first == UInt8(ascii: "@") { path[0] = 0 }  // an abstract socket name
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.count < capacity else {
            logger.error("systemd notify: NOTIFY_SOCKET is too long", metadata: ["path": "\(socketPath)"])
            return
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path)
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count)
        let sent = message.utf8CString.withUnsafeBufferPointer { text in
            withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                    sendto(descriptor, text.baseAddress, text.count - 1, Int32(MSG_NOSIGNAL), socketAddress, length)
                }
            }
        }
        if sent < 0 {
            logger.error("systemd notify failed", metadata: ["message": "\(message)", "errno": "\(errno)"])
        }
    }
}
