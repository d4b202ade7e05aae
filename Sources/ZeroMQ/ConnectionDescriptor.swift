#if canImport(Glibc)
    import Glibc
#endif

/// A connection's file descriptor as libzmq names it (a monitor event's value, a message's `ZMQ_SRCFD`), for what
/// libzmq cannot do itself: close one peer of a bound socket, and say where a connection comes from. The
/// descriptor stays libzmq's: nothing here closes it. Here, beside the rest of what touches libzmq's sockets, so
/// that no other module has to know that libzmq's connections are plain descriptors.
public enum ConnectionDescriptor {
    /// Ends the connection from under libzmq: `shutdown(2)` both ways, never `close(2)`, so the descriptor stays
    /// libzmq's until libzmq, reading end-of-file, closes the connection itself (its pipe, with the subscriptions
    /// or sessions on it) and reports it `disconnected`. Returns whether the call succeeded (it fails harmlessly if
    /// the connection is already gone).
    @discardableResult
    public static func shutDown(_ descriptor: Int32) -> Bool {
        guard descriptor >= 0 else { return false }
        return shutdown(descriptor, Int32(SHUT_RDWR)) == 0
    }

    /// The connection's peer address as libzmq 4.3 gives it to ZAP and in `Peer-Address`: the numeric IP address,
    /// without a port; on a Unix socket (`ipc://`) the host name followed by the peer's `:uid:gid:pid`. `nil` if it
    /// cannot be read (a closed descriptor).
    public static func peerAddress(_ descriptor: Int32) -> String? {
        guard descriptor >= 0 else { return nil }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let read = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(descriptor, $0, &length) }
        }
        guard read == 0 else { return nil }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let named = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
            }
        }
        guard named == 0 else { return nil }
        var address = String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if Int32(storage.ss_family) == AF_UNIX {
            // Linux's `struct ucred` (pid, uid, gid), which Glibc's module map does not export.
            var credentials: (pid: Int32, uid: UInt32, gid: UInt32) = (0, 0, 0)
            var size = socklen_t(MemoryLayout.size(ofValue: credentials))
            guard getsockopt(descriptor, SOL_SOCKET, SO_PEERCRED, &credentials, &size) == 0 else { return nil }
            address += ":\(credentials.uid):\(credentials.gid):\(credentials.pid)"
        }
        return address
    }
}
