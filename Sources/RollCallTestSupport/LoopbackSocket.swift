import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A plain TCP socket connected to `127.0.0.1:port`, for tests and benchmarks that speak HTTP or WebSocket byte by
/// byte (what a scraper or a browser sends, and also what they never would). `receiveBuffer` shrinks the kernel's
/// receive buffer before the connection is made (a reader that cannot keep up). Returns the descriptor, which the
/// caller closes; throws if the connection cannot be made.
public func connectLoopback(port: Int, receiveBuffer: Int32? = nil) throws -> Int32 {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw SupportError("socket() failed: errno \(errno)") }
    if var size = receiveBuffer {
        setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard connected == 0 else {
        let reason = errno
        close(descriptor)
        throw SupportError("cannot connect to 127.0.0.1:\(port): errno \(reason)")
    }
    return descriptor
}
