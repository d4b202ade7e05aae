import GRPCCore
import GRPCNIOTransportHTTP2Posix
import Synchronization

/// The gRPC client of one etcd member: one HTTP/2 connection, opened at the first call, running on an
/// ``EtcdExecutor`` until ``close()``.
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
        /// The calls started on the connection so far.
        let calls = Atomic<Int>(0)
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

    /// Counts one more call; returns `false` once the connection has made ``maxCalls`` calls (it must not make
    /// more).
    func startCall() -> Bool {
        usage.calls.wrappingAdd(1, ordering: .relaxed).newValue <= Self.maxCalls
    }

    /// Stops taking calls; those in flight end first (each has a deadline), then the connection closes.
    func close() { client.beginGracefulShutdown() }

    /// Returns once the connection is closed (after ``close()``).
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
