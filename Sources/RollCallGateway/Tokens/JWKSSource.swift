import AsyncHTTPClient
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// Keys from an identity provider's JWKS URL (`--jwt-jwks-url`, docs/websocket.md): fetched at start, refreshed as
/// ``JWKSRefresh`` says, fetched again (rate-limited) when a token names an unknown `kid`; a failed fetch keeps the
/// last good set. A good fetch whose set lacks a `kid` the last good one had tells ``onKeysRevoked(_:)``'s
/// observers, so that the connections that key's tokens opened are closed as a key file's are. A `Service`: it runs
/// beside the WebSocket door and stops with it.
public actor JWKSSource: Service {
    /// The URL, `http://` or `https://`.
    public nonisolated let url: String
    private let client: HTTPClient
    private let logger: Logger
    private var machine: JWKSRefresh<ContinuousClock.Instant>
    /// The fetch under way, which every caller that wants one awaits.
    private var inFlight: Task<Bool, Never>?
    private nonisolated let current = KeySetBox()
    /// Told of the `kid`s each good fetch takes away (``RevokedKeys/jwksKids``).
    private nonisolated let revocationObservers = Mutex<[@Sendable (RevokedKeys) -> Void]>([])

    /// The longest JWKS document read, in bytes.
    public static let maxBodyBytes = 1 << 20
    /// How long one fetch may take: a token with an unknown `kid` waits for it, within the upgrade's 10 s.
    public static let timeout = TimeAmount.seconds(5)

    public init(url: String, logger: Logger, client: HTTPClient = jwksHTTPClient) {
        self.url = url
        self.client = client
        self.logger = logger
        machine = JWKSRefresh(now: .now)
    }

    /// The last good set, `nil` before the first good fetch.
    nonisolated var keys: TokenKeySet? { current.value.withLock { $0 } }

    /// Calls `observer` with the keys each later good fetch takes away, if it takes any (a failed fetch takes none:
    /// the last good set stays). It is called after the new set is in force.
    nonisolated func onKeysRevoked(_ observer: @escaping @Sendable (RevokedKeys) -> Void) {
        revocationObservers.withLock { $0.append(observer) }
    }

    /// The first fetch, at start: a URL that gives no usable JWKS stops the start, as an unreadable key file does.
    public func start() async throws(TokenKeySet.KeyError) {
        let fetched = await fetchOrJoin()
        guard fetched, keys != nil else {
            throw TokenKeySet.KeyError(
                description: "--jwt-jwks-url: no usable JWKS at \(url) (the fetch's error is logged above)")
        }
    }

    /// Refreshes on schedule until the service group stops.
    public func run() async throws {
        await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                // Waits of at most 10 s, so that a schedule moved sooner by a fetch a token asked for is kept.
                let wait = min(await self.untilDue(), .seconds(10))
                do {
                    try await Task.sleep(for: wait)
                } catch {
                    return
                }
                await self.refreshIfDue()
            }
        }
    }

    /// A token names a `kid` no key has: fetches now unless one was fetched for that reason in the last
    /// ``JWKSRefresh/unknownKidInterval``, and returns the keys then.
    func keysForUnknownKid() async -> TokenKeySet? {
        if inFlight != nil || machine.unknownKid(at: .now) {
            logger.debug("jwks: a token names an unknown kid; fetching", metadata: ["url": "\(url)"])
            _ = await fetchOrJoin()
        }
        return keys
    }

    /// Fetches now, whatever the schedule (SIGHUP).
    public func refreshNow() async {
        _ = await fetchOrJoin()
    }

    private func untilDue() -> Duration {
        max(machine.nextFetch - .now, .zero)
    }

    private func refreshIfDue() async {
        guard machine.isDue(at: .now) else { return }
        _ = await fetchOrJoin()
    }

    /// Joins the fetch under way, or starts one; whether it succeeded.
    private func fetchOrJoin() async -> Bool {
        if let inFlight { return await inFlight.value }
        let task = Task { await self.fetch() }
        inFlight = task
        let fetched = await task.value
        inFlight = nil
        return fetched
    }

    private func fetch() async -> Bool {
        do {
            var request = HTTPClientRequest(url: url)
            request.headers.add(name: "Accept", value: "application/json")
            let response = try await client.execute(request, timeout: Self.timeout)
            guard response.status == .ok else {
                throw TokenKeySet.KeyError(description: "HTTP \(response.status.code)")
            }
            let body = try await response.body.collect(upTo: Self.maxBodyBytes)
            let set = try await TokenKeySet.jwks(String(buffer: body))
            let cacheControl = response.headers["cache-control"]
            let maxAge = JWKSRefresh<ContinuousClock.Instant>.maxAge(
                cacheControl: cacheControl.isEmpty ? nil : cacheControl.joined(separator: ","))
            let old = current.value.withLock { keys in
                defer { keys = set }
                return keys
            }
            machine.fetched(at: .now, maxAge: maxAge)
            // The first fetch has nothing to compare with: no connection is open before it.
            let revoked = old.map { RevokedKeys.betweenJWKS(old: $0.identity, new: set.identity) } ?? RevokedKeys()
            logger.debug(
                "jwks fetched",
                metadata: [
                    "url": "\(url)", "kids": "\(set.kids.sorted())", "kids_removed": "\(revoked.jwksKids.sorted())",
                    "next_in": "\(machine.nextFetch - .now)",
                ])
            if !revoked.isEmpty {
                logger.notice(
                    "jwks: keys removed by the provider; the connections their tokens opened are closed",
                    metadata: ["url": "\(url)", "kids_removed": "\(revoked.jwksKids.sorted())"])
                for observer in revocationObservers.withLock({ $0 }) { observer(revoked) }
            }
            return true
        } catch {
            machine.failed(at: .now)
            logger.warning(
                "jwks fetch failed; the last good keys stay",
                metadata: [
                    "url": "\(url)", "error": "\(error)", "failures": "\(machine.failures)",
                    "retry_in": "\(machine.nextFetch - .now)",
                ])
            return false
        }
    }
}

/// The client of every JWKS fetch, for the process's life (as `HTTPClient.shared` is). Unlike that one, it does not
/// retry a refused connection until the deadline: a provider that is down fails a fetch at once, so that a token
/// whose unknown `kid` asked for the fetch is not held for the whole timeout. At most 3 redirects, none to a
/// cycle; 3 s to connect.
public let jwksHTTPClient: HTTPClient = {
    var configuration = HTTPClient.Configuration(
        redirectConfiguration: .follow(max: 3, allowCycles: false),
        timeout: .init(connect: .seconds(3), read: JWKSSource.timeout))
    configuration.connectionPool.retryConnectionEstablishment = false
    return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
}()

/// The current set, read by every token check without waiting for the actor.
final class KeySetBox: Sendable {
    let value = Mutex<TokenKeySet?>(nil)
}
