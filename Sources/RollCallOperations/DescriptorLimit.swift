import Logging
import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#endif

/// The process's limit of open file descriptors (`RLIMIT_NOFILE`): every socket of every endpoint is one, so a
/// flood of connections that reaches it makes the broker deaf to everyone (new clients, upgrades, `/healthz`).
public enum DescriptorLimit {
    /// Raises the soft limit to the hard one (Linux starts most processes at 1,024 soft, with a far higher hard
    /// limit); returns the limit now in force, or `nil` if it cannot be read.
    @discardableResult
    public static func raiseToHard() -> UInt64? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return UInt64(limit.rlim_cur)
    }

    /// The soft limit now in force.
    public static var current: UInt64? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return UInt64(limit.rlim_cur)
    }

    /// Descriptors open now (the entries of `/proc/self/fd`); `nil` where that cannot be read.
    public static var openCount: Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while readdir(directory) != nil { count += 1 }
        return max(0, count - 3)  // ".", "..", and the directory's own descriptor
    }
}

/// Looks at the open descriptors every few seconds and warns (at most once a minute) when they pass 80% of the
/// limit, so that an operator hears of a flood before the broker goes deaf.
public struct DescriptorWatch: Service {
    private let logger: Logger
    private let interval: Duration

    public init(logger: Logger, interval: Duration = .seconds(5)) {
        self.logger = logger
        self.interval = interval
    }

    /// Watches until shutdown begins (its sleep is cut short then: it never holds the shutdown up).
    public func run() async throws {
        try? await cancelWhenGracefulShutdown { try await watch() }
    }

    private func watch() async throws {
        var lastWarning: ContinuousClock.Instant?
        while true {
            if let limit = DescriptorLimit.current, let open = DescriptorLimit.openCount,
                UInt64(open) * 5 >= limit * 4,
                lastWarning.map({ ContinuousClock.now - $0 >= .seconds(60) }) ?? true
            {
                lastWarning = ContinuousClock.now
                logger.warning(
                    "file descriptors running short: new connections will be refused once none is left",
                    metadata: ["open": "\(open)", "limit": "\(limit)"])
            }
            try await Task.sleep(for: interval)
        }
    }
}
