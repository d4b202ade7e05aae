import Logging
import RollCallBroker

#if canImport(Glibc)
    import Glibc
#endif

/// What every connection of one server shares.
final class GatewayShared: Sendable {
    let gateway: any GatewayLoop
    let verifier: TokenVerifier?
    /// Upgraded connections.
    let counter: ConnectionCounter
    /// Connections accepted and not yet upgraded.
    let pending = ConnectionCounter()
    let connections: ConnectionTables
    let logger: Logger
    /// The wall clock in milliseconds since 1970, which tokens' `exp` is on; a fixed one in tests.
    let wallClock: @Sendable () -> Int64

    init(
        gateway: any GatewayLoop, verifier: TokenVerifier?, counter: ConnectionCounter, connections: ConnectionTables,
        logger: Logger, wallClock: @escaping @Sendable () -> Int64 = { GatewayShared.systemWallClock() }
    ) {
        self.gateway = gateway
        self.verifier = verifier
        self.counter = counter
        self.connections = connections
        self.logger = logger
        self.wallClock = wallClock
    }

    /// `CLOCK_REALTIME` in milliseconds.
    static func systemWallClock() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000 + Int64(spec.tv_nsec) / 1_000_000
    }
}
