// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "rollcall",
    // macOS 15 for the broker (Synchronization); iOS, tvOS and watchOS for the app SDK (RollCallKit): Observation and
    // hummingbird-websocket's client both need iOS 17 / tvOS 17 / watchOS 10 (docs/swift-sdk.md, Platforms).
    platforms: [.macOS(.v15), .iOS(.v17), .tvOS(.v17), .watchOS(.v10)],
    products: [
        .executable(name: "rollcall", targets: ["rollcall"]),
        .executable(name: "rollcall-bench", targets: ["rollcall-bench"]),
        .library(name: "RollCallClient", targets: ["RollCallClient"]),
        .library(name: "RollCallWebSocketClient", targets: ["RollCallWebSocketClient"]),
        // The app SDK (docs/swift-sdk.md): what an iOS app imports. No libzmq.
        .library(name: "RollCallKit", targets: ["RollCallKit"]),
        .library(name: "RollCallBroker", targets: ["RollCallBroker"]),
        .library(name: "RollCallTestKit", targets: ["RollCallTestKit"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // Already in the graph through Hummingbird and async-http-client; named because NIO types are used directly.
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.81.0"),
        // Already in the graph through Hummingbird; named for NIOHTTPTypes (the operations endpoint's head deadline).
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.24.0"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.1.0"),
        // Already in the graph through jwt-kit; named for HMAC-SHA256 (webhook signatures).
        .package(url: "https://github.com/apple/swift-crypto.git", "3.0.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.6.0"),
        // etcd's native API (docs/cluster.md): gRPC over HTTP/2 on NIO, with the protobuf code generated once from
        // etcd's .proto files and committed (scripts/generate-etcd-grpc; the protoc plugins cost minutes to build).
        .package(url: "https://github.com/grpc/grpc-swift-2.git", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport.git", from: "2.9.2"),
        .package(url: "https://github.com/grpc/grpc-swift-protobuf.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-protobuf.git", from: "1.39.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.0.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.1.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.6.0"),
    ],
    targets: [
        // libzmq through pkg-config; only the ZeroMQ target may import it.
        .systemLibrary(
            name: "CZeroMQ",
            pkgConfig: "libzmq",
            providers: [.apt(["libzmq3-dev"])]
        ),
        // The thin, safe wrapper: the only code that calls zmq_*. Knows nothing of presence.
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ"]),
        // Pure presence logic: no sockets, no threads, no clock of its own.
        .target(
            name: "RollCallCore",
            dependencies: [.product(name: "HeapModule", package: "swift-collections")]
        ),
        // Keys and who may do what: CURVE certificates (czmq's format) and the authorized-keys table. Pure text.
        .target(name: "RollCallSecurity", dependencies: ["RollCallCore", "RollCallWire"]),
        // The wire protocol: JSON bodies <-> requests, replies and records.
        .target(name: "RollCallWire", dependencies: ["RollCallCore"]),
        // Persistence: every user's last record and the groups, in SQLite (GRDB) or in memory.
        .target(
            name: "RollCallStore",
            dependencies: ["RollCallCore", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        // Several nodes sharing presence through etcd v3 (docs/cluster.md): a small blocking client of etcd's gRPC
        // API, for threads of its own, and the node's membership state machine.
        .target(
            name: "RollCallCluster",
            dependencies: [
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport"),
                .product(name: "GRPCProtobuf", package: "grpc-swift-protobuf"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            exclude: ["Etcd/Generated/README.md"]
        ),
        // The event loop that owns the ROUTER and XPUB sockets and drives the core.
        .target(
            name: "RollCallBroker",
            dependencies: [
                "RollCallCore", "RollCallSecurity", "RollCallWire", "RollCallStore", "RollCallCluster", "ZeroMQ",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // What a client does, whatever its transport: the session's state machine. No libzmq, so that a client
        // over another transport can use it.
        .target(name: "RollCallClientCore", dependencies: ["RollCallCore", "RollCallWire"]),
        // Presence over the WebSocket endpoint, for apps that cannot ship libzmq: no ZeroMQ here.
        .target(
            name: "RollCallWebSocketClient",
            dependencies: [
                "RollCallClientCore", "RollCallCore", "RollCallWire",
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                // A lock Apple's platforms have before iOS 18 (Synchronization.Mutex is iOS 18+).
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        // The app SDK: a presence session, follow and unfollow on the live connection, an @Observable store, streams.
        .target(
            name: "RollCallKit",
            dependencies: ["RollCallClientCore", "RollCallCore", "RollCallWebSocketClient", "RollCallWire"]
        ),
        // The SDK's example: a conversation list with dots, built on Linux, not shipped in `rollcall`.
        .executableTarget(name: "rollcall-example-contacts", dependencies: ["RollCallKit"]),
        // The client library the CLI and the tests use.
        .target(
            name: "RollCallClient",
            dependencies: ["RollCallClientCore", "RollCallCore", "RollCallSecurity", "RollCallWire", "ZeroMQ"]),
        // For apps' tests: a broker in test mode in-process (with its WebSocket door and operations endpoint if asked),
        // fake users and expectations with deadlines.
        .target(
            name: "RollCallTestKit",
            dependencies: [
                "RollCallBroker", "RollCallClient", "RollCallCore", "RollCallOperations", "RollCallServer",
                "RollCallWire", "ZeroMQ",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // Operations: the HTTP endpoint (metrics, health, readiness, status page) and systemd's notify protocol.
        .target(
            name: "RollCallOperations",
            dependencies: [
                "RollCallBroker", "RollCallCore", "RollCallWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The WebSocket front door: an HTTP server on its own threads that checks tokens (JWT) before the upgrade and
        // hands requests to the event loop through its gateway inbox. It never touches the core.
        .target(
            name: "RollCallGateway",
            dependencies: [
                "RollCallBroker", "RollCallCore", "RollCallSecurity", "RollCallWire",
                // The JWKS URL's fetches (--jwt-jwks-url).
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // Webhook delivery (docs/webhooks.md): the presence log POSTed to each URL, signed as Standard Webhooks says, in
        // offset order, at least once; a pure machine per URL and a service that runs it off the event loop.
        .target(
            name: "RollCallWebhooks",
            dependencies: [
                "RollCallCore", "RollCallWire",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The product assembled: a validated configuration turned into the broker, the WebSocket door, the operations
        // endpoint and the cluster node, in their dependency order. `rollcall serve` and the test kit both use it.
        .target(
            name: "RollCallServer",
            dependencies: [
                "RollCallBroker", "RollCallCluster", "RollCallCore", "RollCallGateway", "RollCallOperations",
                "RollCallSecurity", "RollCallStore", "RollCallWebhooks",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        // What tests and benchmarks share: a `rollcall serve` child process, a pipelining request sender, an etcd
        // cluster. The shipped `rollcall` does not link it.
        .target(
            name: "RollCallTestSupport",
            dependencies: ["RollCallClient", "RollCallCore", "RollCallWire", "ZeroMQ"]
        ),
        // Benchmarks: real broker processes driven over loopback, latency in HDR histograms, CPU and RSS from /proc.
        .target(
            name: "RollCallBench",
            dependencies: [
                "RollCallClient", "RollCallCore", "RollCallSecurity", "RollCallStore", "RollCallTestSupport",
                "RollCallWire", "ZeroMQ",
                // HMAC-SHA256 for the privacy scenario's `user` tokens (HS256).
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // Argument parsing and wiring only.
        .executableTarget(
            name: "rollcall",
            dependencies: [
                "RollCallBroker", "RollCallClient", "RollCallCore", "RollCallGateway", "RollCallOperations",
                "RollCallSecurity", "RollCallServer", "RollCallWebhooks", "RollCallWebSocketClient", "RollCallWire",
                "ZeroMQ",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        // The benchmarks' own executable, so that the broker's binary does not carry them.
        .executableTarget(
            name: "rollcall-bench",
            dependencies: [
                "RollCallBench", "RollCallClient", "RollCallKit", "RollCallTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ"]),
        .testTarget(name: "RollCallCoreTests", dependencies: ["RollCallCore"]),
        .testTarget(name: "RollCallWireTests", dependencies: ["RollCallWire", "RollCallCore"]),
        .testTarget(name: "RollCallStoreTests", dependencies: ["RollCallStore", "RollCallCore"]),
        .testTarget(
            name: "RollCallSecurityTests", dependencies: ["RollCallSecurity", "RollCallCore", "RollCallWire", "ZeroMQ"]),
        .testTarget(
            name: "RollCallBrokerTests",
            dependencies: [
                "RollCallBroker", "RollCallCluster", "RollCallCore", "RollCallSecurity", "RollCallStore",
                "RollCallWire",
                "ZeroMQ", .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "RollCallGatewayTests",
            dependencies: [
                "RollCallBroker", "RollCallCore", "RollCallGateway", "RollCallSecurity", "RollCallWire",
                // A JWKS served in-process that rotates its keys, and tokens signed for the tests.
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "RollCallWebhooksTests",
            dependencies: [
                "RollCallCore", "RollCallWebhooks", "RollCallWire",
                // The receiver: a real HTTP server in the test, on a free loopback port.
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "RollCallServerTests",
            dependencies: [
                "RollCallBroker", "RollCallOperations", "RollCallServer", "RollCallStore", "RollCallWebhooks",
            ]),
        .testTarget(name: "RollCallClusterTests", dependencies: ["RollCallCluster", "RollCallTestSupport"]),
        .testTarget(
            name: "RollCallClientCoreTests", dependencies: ["RollCallClientCore", "RollCallCore", "RollCallWire"]),
        .testTarget(name: "RollCallKitTests", dependencies: ["RollCallKit", "RollCallCore"]),
        .testTarget(
            name: "RollCallIntegrationTests",
            dependencies: [
                "RollCallBroker", "RollCallClient", "RollCallCluster", "RollCallCore", "RollCallGateway",
                "RollCallOperations", "RollCallSecurity", "RollCallServer", "RollCallStore", "RollCallTestSupport",
                "RollCallTestKit", "RollCallKit", "RollCallWebhooks", "RollCallWebSocketClient", "RollCallWire",
                "ZeroMQ", "rollcall", "rollcall-bench", "rollcall-example-contacts",
                .product(name: "DequeModule", package: "swift-collections"),
                // A webhook receiver in the test (WebhookTests).
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                // A TCP relay that a test cuts: the network between a phone and the broker (TCPRelay).
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
