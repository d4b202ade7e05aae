import Foundation
import RollCallTestSupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP relay on loopback in front of one etcd member, which can hold what clients send: while it holds, requests
/// reach the relay and go no further, and their senders see a member that does not answer (their timeout ends the
/// call). On ``release()`` everything held goes on to the member, on connections kept open until it answered.
///
/// This is a request that a member received and carried out late, made deterministic: a SIGSTOPped member does the
/// same, but whether it carries out a request whose sender gave up depends on which it reads first, the request or
/// the sender's cancellation (the fault run's bug 2 showed in 2 runs of 6 that way). So the relay drops, from what
/// it held, the client's cancellations of its calls and its goodbye (HTTP/2 RST_STREAM and GOAWAY frames: etcd's
/// clients speak gRPC), and keeps the member's connection open a while after the client left.
final class HoldingRelay: Sendable {
    let port: Int
    private let upstreamPort: Int
    private let listener: Int32
    private let state = Mutex(State())
    /// Broadcast when the relay releases or stops (what a held connection waits for).
    private let changed = NSCondition()
    /// Signalled with each late answer (``waitForLateAnswer(timeout:)``).
    private let lateAnswer = DispatchSemaphore(value: 0)

    private struct State {
        var holding = false
        /// While holding: hold only the connections whose bytes contain this, once they do (`nil`: hold all).
        var pattern: [UInt8]?
        /// Whether a connection the pattern matches goes through, and the member's answer to it is lost instead.
        var losesAnswers = false
        /// How many more connections the pattern may hold (``hold(matching:connections:)``).
        var connectionsLeft = Int.max
        var stopped = false
        var descriptors: Set<Int32> = []
    }

    /// Whether one connection's client has left and nothing of it is held.
    private final class Finished: Sendable {
        let done = Atomic<Bool>(false)
        /// Whether the member's answers on this connection are dropped (``loseAnswers(matching:)``).
        let answerLost = Atomic<Bool>(false)
        /// Whether the relay held some of this connection's bytes: only its answers count as late ones.
        let held = Atomic<Bool>(false)
        let exited = DispatchSemaphore(value: 0)
    }

    /// How long a connection whose client left stays open for the member's answer.
    private static let linger: Duration = .seconds(5)

    init(upstreamPort: Int) throws {
        self.upstreamPort = upstreamPort
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw SupportError("socket() failed: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(listener, pointer, length) == 0 && listen(listener, 16) == 0
                    && getsockname(listener, pointer, &length) == 0
            }
        }
        guard bound else {
            close(listener)
            throw SupportError("cannot listen on loopback: errno \(errno)")
        }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        let relay = self
        Thread.detachNewThread { relay.acceptConnections() }
    }

    /// From now on, what clients send stays in the relay.
    func hold() {
        state.withLock { state in
            state.holding = true
            state.pattern = nil
            state.losesAnswers = false
        }
    }

    /// From now on, a connection whose bytes contain `pattern` (within one read) stays in the relay from those bytes
    /// on; the others go through.
    /// At most `connections` are held that way; later ones go through.
    func hold(matching pattern: String, connections: Int = .max) {
        state.withLock { state in
            state.holding = true
            state.pattern = Array(pattern.utf8)
            state.losesAnswers = false
            state.connectionsLeft = connections
        }
    }

    /// From now on, a connection whose bytes contain `pattern` (within one read) goes through to the member, but
    /// the member's answers on it never reach the client: a request carried out whose answer was lost.
    func loseAnswers(matching pattern: String) {
        state.withLock { state in
            state.holding = true
            state.pattern = Array(pattern.utf8)
            state.losesAnswers = true
        }
    }

    /// What was held, and what comes later, goes on to the member.
    func release() {
        state.withLock { state in
            state.holding = false
            state.pattern = nil
            state.losesAnswers = false
        }
        wake()
    }

    /// Whether this connection's `pending` bytes stay in the relay; `matched`: whether the pattern matched it before.
    /// A connection matched while the relay loses answers goes through, and `finished` says its answers are lost.
    private func holds(_ pending: [UInt8], matched: inout Bool, finished: Finished) -> Bool {
        state.withLock { state in
            guard state.holding else { return false }
            if state.losesAnswers {
                if !matched, let pattern = state.pattern { matched = Self.contains(pending, pattern) }
                if matched {
                    finished.answerLost.store(true, ordering: .sequentiallyConsistent)
                    finished.held.store(true, ordering: .sequentiallyConsistent)
                }
                return false
            }
            guard let pattern = state.pattern, !matched else {
                if !pending.isEmpty { finished.held.store(true, ordering: .sequentiallyConsistent) }
                return true
            }
            guard state.connectionsLeft > 0, Self.contains(pending, pattern) else { return false }
            state.connectionsLeft -= 1
            matched = true
            finished.held.store(true, ordering: .sequentiallyConsistent)
            return true
        }
    }

    private static func contains(_ bytes: [UInt8], _ pattern: [UInt8]) -> Bool {
        bytes.count >= pattern.count
            && (0...(bytes.count - pattern.count)).contains { bytes[$0..<($0 + pattern.count)].elementsEqual(pattern) }
    }

    /// Whether the member answered a request whose client had left, within `timeout`.
    func waitForLateAnswer(timeout: Duration) -> Bool {
        lateAnswer.wait(timeout: .now() + .milliseconds(Int(timeout / .milliseconds(1)))) == .success
    }

    private func wake() {
        changed.lock()
        changed.broadcast()
        changed.unlock()
    }

    /// Closes every connection and the listener. Descriptors are shut down and closed under the lock only, so that
    /// none is touched after its number went to another socket of the process.
    func stop() {
        state.withLock { state in
            state.stopped = true
            for descriptor in state.descriptors { shutdown(descriptor, Int32(SHUT_RDWR)) }
        }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        wake()
    }

    private var isStopped: Bool { state.withLock { $0.stopped } }

    private func acceptConnections() {
        while !isStopped {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            guard let upstream = try? connectLoopback(port: upstreamPort) else {
                close(client)
                continue
            }
            state.withLock { $0.descriptors.formUnion([client, upstream]) }
            let finished = Finished()
            let relay = self
            Thread.detachNewThread { relay.forward(from: client, to: upstream, finished: finished) }
            Thread.detachNewThread { relay.answer(from: upstream, to: client, finished: finished) }
        }
    }

    /// Client to member: everything goes through `held`, which is sent on whenever the relay does not hold. Ends
    /// once the client has left and nothing is held any more.
    private func forward(from client: Int32, to upstream: Int32, finished: Finished) {
        var frames = ClientFrames()
        var held: [UInt8] = []
        var matched = false
        var clientGone = false
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !isStopped {
            if !clientGone {
                var descriptor = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
                if poll(&descriptor, 1, 10) > 0 {
                    let count = read(client, &buffer, buffer.count)
                    if count > 0 { held += buffer[0..<count] } else { clientGone = true }
                }
            } else {
                // The client left with something held: wait for the release, or the relay's stop.
                changed.lock()
                while !isStopped, holds(held, matched: &matched, finished: finished) { changed.wait() }
                changed.unlock()
            }
            if !held.isEmpty, !holds(held, matched: &matched, finished: finished) {
                let wasHeld = finished.held.load(ordering: .sequentiallyConsistent)
                let bytes = frames.pass(held, droppingCancellations: wasHeld)
                _ = bytes.withUnsafeBytes { send(upstream, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                held = []
            }
            if clientGone, held.isEmpty { break }
        }
        finished.done.store(true, ordering: .sequentiallyConsistent)
        finished.exited.signal()
    }

    /// Member to client, as it comes; once the client has left, the member's answer is read and dropped until it
    /// has been quiet for ``linger``. Closes the connection's two descriptors once ``forward(from:to:finished:)``
    /// is done with them.
    private func answer(from upstream: Int32, to client: Int32, finished: Finished) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var quietSince = ContinuousClock.now
        while !isStopped {
            var descriptor = pollfd(fd: upstream, events: Int16(POLLIN), revents: 0)
            if poll(&descriptor, 1, 50) > 0 {
                let count = read(upstream, &buffer, buffer.count)
                guard count > 0 else { break }
                if finished.done.load(ordering: .sequentiallyConsistent),
                    finished.held.load(ordering: .sequentiallyConsistent)
                {
                    lateAnswer.signal()
                }
                if !finished.answerLost.load(ordering: .sequentiallyConsistent) {
                    _ = send(client, buffer, count, Int32(MSG_NOSIGNAL))
                }
                quietSince = .now
            } else if finished.done.load(ordering: .sequentiallyConsistent),
                ContinuousClock.now - quietSince > Self.linger
            {
                break
            }
        }
        shutdown(client, Int32(SHUT_RDWR))  // the forwarding side sees its client gone
        finished.exited.wait()
        state.withLock { state in
            state.descriptors.subtract([client, upstream])
            close(client)
            close(upstream)
        }
    }
}

/// The client's side of an HTTP/2 connection cut into frames as it passes (the 24-byte preface, then frames of a
/// 9-byte header and a payload), so that the relay can leave some out.
private struct ClientFrames {
    private var prefaceLeft = 24
    private var header: [UInt8] = []
    private var payloadLeft = 0
    private var dropping = false

    /// `bytes` as they go on: without RST_STREAM and GOAWAY frames when `droppingCancellations`.
    mutating func pass(_ bytes: [UInt8], droppingCancellations: Bool) -> [UInt8] {
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let left = bytes.count - index
            if prefaceLeft > 0 || payloadLeft > 0 {
                let count = min(prefaceLeft > 0 ? prefaceLeft : payloadLeft, left)
                if prefaceLeft > 0 || !dropping { out += bytes[index..<(index + count)] }
                if prefaceLeft > 0 { prefaceLeft -= count } else { payloadLeft -= count }
                index += count
                continue
            }
            let count = min(9 - header.count, left)
            header += bytes[index..<(index + count)]
            index += count
            guard header.count == 9 else { continue }
            let kind = header[3]
            dropping = droppingCancellations && (kind == 0x3 || kind == 0x7)  // RST_STREAM, GOAWAY
            if !dropping { out += header }
            payloadLeft = Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
            header = []
        }
        return out
    }
}
