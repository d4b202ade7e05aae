import GRPCCore
import GRPCNIOTransportHTTP2Posix
import Synchronization

/// The gRPC client of one etcd member: one HTTP/2 connection, opened at the first call, running on an
/// ``EtcdExecutor``. Calls on it are counted: once it is retired (after a failed call, or once it has made
/// ``maxCalls``) it takes no more, and it closes when the last call in flight on it ends.
final class EtcdConnection: Sendable {
    typealias Transport = HTTP2ClientTransport.Posix

    /// How many calls one connection makes before the client opens a new one for the next calls.
    ///
    /// etcd's gRPC server (grpc-go with its dynamic flow-control window) sends a PING to estimate the bandwidth
    /// after most requests it receives, about one per call; swift-nio-http2, as grpc-swift-nio-transport 2.9
    /// configures it (not configurable), closes a connection that receives more than 200 PING or SETTINGS frames
    /// within 30 s (`NIOHTTP2Errors.ExcessiveControlFrames`), and the calls in flight on it fail, though etcd may
    /// have carried them out. A connection that makes at most 100 calls never receives that many.
    static let maxCalls = 100

    let endpoint: EtcdEndpoint
    let client: GRPCClient<Transport>
    private let running: Task<Void, Never>
    private let usage = Usage()

    private final class Usage: Sendable {
        struct Calls {
            var started = 0
            var inFlight = 0
            var retired = false
        }

        let calls = Mutex(Calls())
        /// Set once the connection is closed and its task has ended.
        let ended = Atomic<Bool>(false)
    }

    init(to endpoint: EtcdEndpoint, on executor: EtcdExecutor) throws {
        self.endpoint = endpoint
        let transport = try Transport(
            target: .dns(host: endpoint.host, port: endpoint.port), transportSecurity: .plaintext,
            config: .defaults { config in
                // A member that refused a connection is tried again within a second, not after gRPC's default
                // backoff of up to two minutes: the client goes back to it when the others fail.
                config.backoff = .init(initial: .milliseconds(100), max: .seconds(1), multiplier: 1.6, jitter: 0.2)
            })
        let client = GRPCClient(transport: transport)
        self.client = client
        let usage = usage
        running = Task(executorPreference: executor) {
            // It ends when the client is closed; an error here is the transport's, and each call reports its own.
            try? await client.runConnections()
            usage.ended.store(true, ordering: .releasing)
        }
    }

    /// Starts one more call on this connection; `false` if it is retired. The call that reaches ``maxCalls``
    /// retires it (and goes ahead).
    func beginCall() -> Bool {
        usage.calls.withLock { calls in
            guard !calls.retired else { return false }
            calls.started += 1
            calls.inFlight += 1
            if calls.started >= Self.maxCalls { calls.retired = true }
            return true
        }
    }

    /// Ends a call begun with ``beginCall()``; the last call on a retired connection closes it.
    func endCall() {
        let close = usage.calls.withLock { calls in
            calls.inFlight -= 1
            return calls.retired && calls.inFlight == 0
        }
        if close { client.beginGracefulShutdown() }
    }

    /// Takes no more calls, and closes once those in flight have ended (each has a deadline).
    func retire() {
        let close = usage.calls.withLock { calls in
            calls.retired = true
            return calls.inFlight == 0
        }
        if close { client.beginGracefulShutdown() }
    }

    /// Whether the connection takes no more calls.
    var isRetired: Bool { usage.calls.withLock { $0.retired } }

    /// Returns once the connection is closed (after its retirement and its last call).
    func closed() async { await running.value }

    /// Whether the connection is closed and its task has ended.
    var isClosed: Bool { usage.ended.load(ordering: .acquiring) }

    /// The options of every call: its deadline, failing at once (not waiting for a connection) when the member
    /// cannot be reached, and replies up to 64 MiB (a watch response, a page of large values).
    static func options(timeout: Duration?) -> CallOptions {
        var options = CallOptions.defaults
        options.timeout = timeout
        options.waitForReady = false
        options.maxResponseMessageBytes = 64 << 20
        return options
    }
}
extension EtcdError {
    /// What a failed call's error means, for a call to `member`.
    init(_ error: any Error, member: EtcdEndpoint) {
        switch error {
        case let error as EtcdError:
            self = error
        case let error as RPCError:
            switch error.code {
            case .unavailable, .cancelled: self = .unreachable(member.description, error.message)
            case .deadlineExceeded: self = .timedOut(member.description)
            case .outOfRange where error.message.contains("compacted"): self = .compacted(compactRevision: 0)
            default: self = .rpc(code: "\(error.code)", error.message)
            }
        case let error as RuntimeError:
            // The client is closed, or its transport failed.
            self = .unreachable(member.description, error.message)
        default:
            self = .protocolError("\(error)")
        }
    }

    /// Whether etcd said the lease does not exist (expired or revoked).
    var isLeaseNotFound: Bool {
        if case .rpc("notFound", let message) = self { message.contains("lease not found") } else { false }
    }
}
