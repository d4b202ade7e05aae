import Foundation
import RollCallClientCore
import RollCallCore
import RollCallWebSocketClient
import RollCallWire

/// RollCall presence for an app, over the WebSocket endpoint (docs/swift-sdk.md): the app's own session, the users
/// and groups it shows, and a ``PresenceStore`` a view reads.
///
/// Made on the main actor, it never throws and never waits: the session says hello as soon as a broker answers
/// (retrying with jittered backoff, ``reconnectNow()`` to try at once), and the store serves the last known records
/// meanwhile (from the cache file, if the app names one, marked stale). Two connections carry it: the session's
/// (``WebSocketSession``, the session machine) and the watch's (``WebSocketWatch``, the watch machine); what they
/// learn reaches the store through one ordered stream, on the main actor.
@MainActor
public final class PresenceClient {
    /// Where the client stands, for code that is not a view (a view reads the store).
    public struct ConnectionState: Sendable, Equatable {
        /// The app's session (`nil` for a client that only watches).
        public var session: SessionMachine.Phase?
        /// Whether the watch's connection is open.
        public var watching: Bool
        /// Whether the broker's heartbeat stopped.
        public var brokerLost: Bool
    }

    /// What the session and the watch tell, in order, on their own tasks; applied on the main actor.
    private enum Inbound: Sendable {
        case session(SessionMachine.Phase)
        case watch(WebSocketWatch.Event)
    }

    /// The presence a view reads.
    public let store: PresenceStore
    private let session: WebSocketSession?
    private let watch: WebSocketWatch
    private let cache: PresenceCache?
    private let inbound: AsyncStream<Inbound>.Continuation
    private var applying: Task<Void, Never>?
    private let recordStreams = Broadcast<PresenceRecord>()
    private let groupStreams = Broadcast<GroupUpdate>()
    private let stateStreams = Broadcast<ConnectionState>()
    /// The status the app asked for last, to come back to in ``enterForeground()``.
    private var foreground: (status: Status, text: String?)
    private var cacheDirty = false

    /// A client of `url` (`wss://HOST/v1/ws`). With `me`, it holds that user's session with `status` and `text`
    /// (kept alive by the connection unless `keepAlive` says otherwise); without, it only watches. `token` or
    /// `tokenProvider` (asked before each connection and before each token expires) sign it in. `cacheFile`: where to
    /// keep the last known records across launches.
    public init(
        url: String, me: UserID? = nil, status: Status = .online, text: String? = nil, device: String? = nil,
        keepAlive: PresenceCore.KeepAlive = .connection, token: String? = nil,
        tokenProvider: (@Sendable () async throws -> String)? = nil, cacheFile: URL? = nil
    ) {
        let cache = cacheFile.map(PresenceCache.init(url:))
        self.cache = cache
        store = PresenceStore(cached: cache?.load() ?? [])
        foreground = (status, text)
        let (stream, inbound) = AsyncStream<Inbound>.makeStream()
        self.inbound = inbound
        session = me.map { user in
            WebSocketSession(
                startingWithoutWaiting: url, token: token, tokenProvider: tokenProvider,
                hello: PresenceCore.Hello(user: user, device: device, status: status, text: text, keepAlive: keepAlive)
            ) { phase in inbound.yield(.session(phase)) }
        }
        watch = WebSocketWatch(url: url, token: token, tokenProvider: tokenProvider) { event in
            inbound.yield(.watch(event))
        }
        store.setSession(session?.state)
        applying = Task { [weak self] in
            for await event in stream {
                guard let self else { return }
                self.apply(event)
            }
        }
    }

    // MARK: The app's own status

    /// Sets the app's status and text: sent at once, or when the broker answers again. With `after`, the broker
    /// holds the change and publishes it only if nothing else is said within that time (at most 10 minutes).
    public func setStatus(_ status: Status, text: String? = nil, after: Duration? = nil) {
        if after == nil { foreground = (status, text) }
        session?.setStatus(status, text: text, afterMilliseconds: after.map(Self.milliseconds))
    }

    /// The app goes to the background: `status` (offline by default) is held by the broker for `after`, so that the
    /// user shows it only if the app does not come back within that time, and shows it then even if the phone has
    /// suspended the app meanwhile. The cache file is written now, while the app may still run.
    public func enterBackground(after: Duration = .seconds(5), status: Status = .offline) {
        session?.setStatus(status, text: nil, afterMilliseconds: Self.milliseconds(after))
        saveCache()
    }

    /// The app is back: the status before ``enterBackground(after:status:)`` again (which cancels a held change not
    /// published yet, so a quick switch shows nothing), and the connections are tried at once.
    public func enterForeground() {
        session?.setStatus(foreground.status, text: foreground.text)
        reconnectNow()
    }

    /// The network is back (or changed): the session and the watch try at once instead of waiting out their backoff.
    public func reconnectNow() {
        session?.reconnectNow()
        watch.reconnectNow()
    }

    // MARK: Following

    /// Shows `user`: their current record comes first, then every change.
    public func follow(_ user: UserID) { watch.follow(.presence(user)) }

    /// Stops showing `user` (once per ``follow(_:)``): no more changes come; the store keeps the last record.
    public func unfollow(_ user: UserID) { watch.unfollow(.presence(user)) }

    /// Shows `group`'s counts ("3 of 5 online") and its members' changes.
    public func follow(group: GroupID) { watch.follow(.group(group)) }

    /// Stops showing `group`.
    public func unfollow(group: GroupID) { watch.unfollow(.group(group)) }

    // MARK: Streams, for code that is not a view

    /// Every record the store applies, from now on, on the main actor.
    public func records() -> AsyncStream<PresenceRecord> { recordStreams.stream(buffering: 1_024) }

    /// Every group message the store applies, from now on.
    public func groupMessages() -> AsyncStream<GroupUpdate> { groupStreams.stream(buffering: 256) }

    /// The connection state now, then each change.
    public func connectionStates() -> AsyncStream<ConnectionState> {
        stateStreams.stream(buffering: 16, startingWith: connectionState)
    }

    /// Whether the app's last status change still waits for the broker's answer (after which a held change is
    /// held by the broker, and so happens even if the app is suspended).
    public var statusPending: Bool { session?.statusPending ?? false }

    /// The connection state now.
    public var connectionState: ConnectionState {
        ConnectionState(session: store.session, watching: store.watching, brokerLost: store.brokerLost)
    }

    /// Writes the store's records to the cache file, if there is one.
    public func saveCache() {
        guard let cache else { return }
        try? cache.save(store.records)
        cacheDirty = false
    }

    /// Says bye, closes both connections, writes the cache and ends the streams.
    public func close() async {
        await session?.close()
        await watch.close()
        store.setSession(session?.state)
        store.setWatching(false)
        saveCache()
        inbound.finish()
        applying?.cancel()
        recordStreams.finish()
        groupStreams.finish()
        stateStreams.finish()
    }

    // MARK: Applying

    private func apply(_ event: Inbound) {
        let before = connectionState
        switch event {
        case .session(let phase):
            store.setSession(phase)
        case .watch(.record(let record)):
            store.apply(record)
            recordStreams.yield(record)
            noteChange()
        case .watch(.group(let update)):
            store.apply(update)
            groupStreams.yield(update)
            for record in update.changed { recordStreams.yield(record) }
            noteChange()
        case .watch(.broker(let change)):
            store.setBrokerLost(change == .lost)
        case .watch(.connected):
            store.setWatching(true)
        case .watch(.disconnected):
            store.setWatching(false)
        case .watch(.heartbeat(let brokerTime)):
            store.setClockOffset(brokerTime: brokerTime, deviceTime: Int64(Date().timeIntervalSince1970 * 1_000))
        }
        let after = connectionState
        if after != before { stateStreams.yield(after) }
    }

    /// Writes the cache a second after the first change not written, so that a burst costs one write.
    private func noteChange() {
        guard cache != nil, !cacheDirty else { return }
        cacheDirty = true
        Task { [weak self] in
            try? await Task.sleep(for: .seconds(1))
            guard let self, self.cacheDirty else { return }
            self.saveCache()
        }
    }

    private static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return max(1, min(600_000, seconds * 1_000 + attoseconds / 1_000_000_000_000_000))
    }
}
