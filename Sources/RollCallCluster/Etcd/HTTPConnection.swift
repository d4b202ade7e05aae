import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One HTTP/1.1 connection to one etcd member's JSON gateway, with blocking I/O and deadlines: for the etcd
/// client's own threads, never for the event loop.
///
/// etcd's gateway speaks a small subset of HTTP: a POST with a JSON body, answered either with `Content-Length`
/// (unary calls) or with chunked transfer encoding, one JSON object per chunk (watch, lease keep-alive). That subset
/// is all this type implements; it reuses the connection for the next request (HTTP/1.1 keep-alive).
final class HTTPConnection {
    let endpoint: EtcdEndpoint
    private var descriptor: Int32
    private var buffer: [UInt8] = []
    private var start = 0
    /// Set once the connection is unusable; every later call throws.
    private(set) var isBroken = false

    /// Connects within `timeout`; throws ``EtcdError/unreachable(_:_:)`` otherwise.
    init(endpoint: EtcdEndpoint, timeout: Duration) throws {
        self.endpoint = endpoint
        descriptor = try Self.connect(endpoint, timeout: timeout)
    }

    deinit { close() }

    /// Closes the socket; a thread blocked in ``readChunk(timeout:)`` on it returns with an error.
    func close() {
        guard descriptor >= 0 else { return }
        isBroken = true
        _ = Glibc.shutdown(descriptor, Int32(SHUT_RDWR))
        _ = Glibc.close(descriptor)
        descriptor = -1
    }

    /// Wakes a thread blocked on a connection's reads without closing the descriptor (which that thread still
    /// owns and closes): safe from any thread.
    static func interrupt(socket: Int32) {
        _ = Glibc.shutdown(socket, Int32(SHUT_RDWR))
    }

    /// The socket, for ``interrupt(socket:)`` from another thread.
    var socket: Int32 { descriptor }

    /// Sends `POST path` with a JSON body and returns the status and the whole body (both unary and chunked
    /// replies are read to their end).
    func post(_ path: String, body: Data, timeout: Duration) throws -> (status: Int, body: Data) {
        let deadline = ContinuousClock.now + timeout
        try send(path: path, body: body, deadline: deadline)
        let head = try readHead(deadline: deadline)
        if head.chunked {
            var all = Data()
            while let chunk = try readChunk(deadline: deadline) { all.append(chunk) }
            return (head.status, all)
        }
        return (head.status, try readBytes(head.contentLength ?? 0, deadline: deadline))
    }

    /// Sends `POST path` and reads the reply's head; the body then comes chunk by chunk through
    /// ``readChunk(deadline:)``. For streams (watch).
    func openStream(_ path: String, body: Data, timeout: Duration) throws -> Int {
        let deadline = ContinuousClock.now + timeout
        try send(path: path, body: body, deadline: deadline)
        let head = try readHead(deadline: deadline)
        guard head.chunked else {
            // An error answered in one piece: read it so the caller can report it.
            let text = try readBytes(head.contentLength ?? 0, deadline: deadline)
            throw EtcdError.http(status: head.status, String(decoding: text, as: UTF8.self))
        }
        return head.status
    }

    /// The next chunk of a chunked body, or `nil` at its end; throws ``EtcdError/timedOut(_:)`` at `deadline`.
    func readChunk(deadline: ContinuousClock.Instant?) throws -> Data? {
        let sizeLine = try readLine(deadline: deadline)
        let hex = sizeLine.split(separator: ";").first.map(String.init) ?? ""
        guard let size = Int(hex.trimmingCharacters(in: .whitespaces), radix: 16) else {
            throw fail(.protocolError("bad chunk size line '\(sizeLine)'"))
        }
        if size == 0 {
            // Trailers, if any, end with an empty line.
            while try !readLine(deadline: deadline).isEmpty {}
            return nil
        }
        let data = try readBytes(size, deadline: deadline)
        guard try readLine(deadline: deadline).isEmpty else { throw fail(.protocolError("chunk not followed by CRLF")) }
        return data
    }

    // MARK: - Request and reply head

    private func send(path: String, body: Data, deadline: ContinuousClock.Instant) throws {
        guard !isBroken else { throw EtcdError.unreachable(endpoint.description, "connection closed") }
        var request = Data(
            ("POST \(path) HTTP/1.1\r\nHost: \(endpoint.host):\(endpoint.port)\r\n"
                + "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n").utf8)
        request.append(body)
        try request.withUnsafeBytes { raw in
            var sent = 0
            while sent < raw.count {
                try waitFor(events: Int16(POLLOUT), deadline: deadline)
                let n = Glibc.send(descriptor, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
                if n < 0 {
                    if errno == EINTR || errno == EAGAIN { continue }
                    throw fail(.unreachable(endpoint.description, "send: \(String(cString: strerror(errno)))"))
                }
                sent += n
            }
        }
    }

    private struct Head {
        var status: Int
        var contentLength: Int?
        var chunked: Bool
    }

    private func readHead(deadline: ContinuousClock.Instant) throws -> Head {
        let statusLine = try readLine(deadline: deadline)
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw fail(.protocolError("bad status line '\(statusLine)'"))
        }
        var head = Head(status: status, contentLength: nil, chunked: false)
        while true {
            let line = try readLine(deadline: deadline)
            if line.isEmpty { break }
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if name == "content-length" { head.contentLength = Int(value) }
            if name == "transfer-encoding", value.lowercased().contains("chunked") { head.chunked = true }
        }
        return head
    }

    // MARK: - Buffered reads

    private func readLine(deadline: ContinuousClock.Instant?) throws -> String {
        while true {
            if let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                var end = newline
                if end > start, buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                let line = String(decoding: buffer[start..<end], as: UTF8.self)
                start = newline + 1
                return line
            }
            guard buffer.count - start < 64 * 1_024 else { throw fail(.protocolError("line too long")) }
            try fill(deadline: deadline)
        }
    }

    private func readBytes(_ count: Int, deadline: ContinuousClock.Instant?) throws -> Data {
        while buffer.count - start < count { try fill(deadline: deadline) }
        let data = Data(buffer[start..<start + count])
        start += count
        return data
    }

    private func fill(deadline: ContinuousClock.Instant?) throws {
        if start > 0 {
            buffer.removeFirst(start)
            start = 0
        }
        try waitFor(events: Int16(POLLIN), deadline: deadline)
        var chunk = [UInt8](repeating: 0, count: 16 * 1_024)
        let n = chunk.withUnsafeMutableBytes { Glibc.recv(descriptor, $0.baseAddress, $0.count, 0) }
        if n < 0 {
            if errno == EINTR || errno == EAGAIN { return }
            throw fail(.unreachable(endpoint.description, "recv: \(String(cString: strerror(errno)))"))
        }
        if n == 0 { throw fail(.unreachable(endpoint.description, "connection closed by etcd")) }
        buffer.append(contentsOf: chunk[0..<n])
    }

    /// Polls until the socket is ready for `events`, throwing at `deadline` (none: wait as long as it takes).
    private func waitFor(events: Int16, deadline: ContinuousClock.Instant?) throws {
        while true {
            guard descriptor >= 0 else { throw EtcdError.unreachable(endpoint.description, "connection closed") }
            var timeoutMs: Int32 = -1
            if let deadline {
                let left = deadline - ContinuousClock.now
                guard left > .zero else { throw fail(.timedOut(endpoint.description)) }
                let ms = left.components.seconds * 1_000 + left.components.attoseconds / 1_000_000_000_000_000
                timeoutMs = Int32(clamping: max(ms, 1))
            }
            var fd = pollfd(fd: descriptor, events: events, revents: 0)
            let ready = Glibc.poll(&fd, 1, timeoutMs)
            if ready < 0 {
                if errno == EINTR { continue }
                throw fail(.unreachable(endpoint.description, "poll: \(String(cString: strerror(errno)))"))
            }
            if ready > 0 { return }
        }
    }

    private func fail(_ error: EtcdError) -> EtcdError {
        isBroken = true
        return error
    }

    // MARK: - Connecting

    private static func connect(_ endpoint: EtcdEndpoint, timeout: Duration) throws -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(endpoint.host, String(endpoint.port), &hints, &list)
        guard status == 0, let first = list else {
            throw EtcdError.unreachable(
                endpoint.description, "cannot resolve: \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(list) }
        var reason = "no address"
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let info = next {
            next = info.pointee.ai_next
            let fd = Glibc.socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { continue }
            let flags = fcntl(fd, F_GETFL)
            _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            var one: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return fd }
            guard errno == EINPROGRESS else {
                reason = String(cString: strerror(errno))
                _ = Glibc.close(fd)
                continue
            }
            let ms = timeout.components.seconds * 1_000 + timeout.components.attoseconds / 1_000_000_000_000_000
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let ready = Glibc.poll(&pfd, 1, Int32(clamping: ms))
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
            if ready == 1, error == 0 { return fd }
            reason = ready == 0 ? "connect timed out" : String(cString: strerror(error))
            _ = Glibc.close(fd)
        }
        throw EtcdError.unreachable(endpoint.description, reason)
    }
}
