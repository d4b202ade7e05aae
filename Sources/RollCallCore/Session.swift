extension PresenceCore {
    /// One session: what its client set, and where it stands in its life (``State``). Every change of state goes
    /// through the mutating functions below, so that the transitions live in one place.
    struct Session: Sendable {
        /// Where a session stands. Each state carries what only it has, so no impossible mix can be represented.
        ///
        /// ```
        ///            hello                     request over another connection
        ///   ───────────────────▶ attached ◀──────────────────────────────┐
        ///                          │   ▲  └──────────────────────────────┘
        ///   connection closed,     │   │ any request names it
        ///   grace > 0              ▼   │ (over any connection)
        ///                        detached ──── grace or TTL runs out ──▶ ended (closed)
        ///
        ///   restore ──▶ placeholder ──── a hello of its user ──▶ replaced, nothing published
        ///                     └───────── TTL runs out ─────────▶ ended (restart)
        ///
        ///   cluster store ──▶ remote ──── changed or ended by the store only ──▶ ended (its node's reason)
        /// ```
        /// `attached` also ends by `bye` (reason bye), by its TTL (timeout), and by its connection closing without a
        /// grace period (closed).
        enum State: Sendable, Equatable {
            /// Live: its latest request came over `connection`, or over a transport the broker cannot track (`nil`,
            /// such as inproc), where only the TTL ends it.
            case attached(ConnectionID?)
            /// Its connection closed and it waits out the grace period; a request that names it attaches it again.
            case detached
            /// Stands for the sessions a user had before a restart, until a hello of that user takes its place. No
            /// client can name it.
            case placeholder
            /// A session as the cluster's store holds it (docs/cluster.md): another node's, or this node's own as it
            /// came back from the store. It counts towards its user's record, has no connection and no TTL here, and
            /// only the store changes or ends it. No client can name it.
            case remote
        }

        let user: UserID
        var device: String?
        var status: Status
        var text: String?
        /// When the status last changed, as a core-wide counter: among equal statuses the latest change wins.
        var statusOrder: UInt64
        let ttl: Int64
        /// `hello` asked for ``KeepAlive/connection``: while attached to a tracked connection its TTL does not run
        /// out; it ends when the connection closes (after the grace period), by `bye`, or by its TTL once detached.
        let keptByConnection: Bool
        var expiresAt: BrokerTime
        private(set) var state: State
        /// A change it asked for with `after_ms`, not yet in effect (PresenceCore+HeldStatus.swift).
        var held: HeldChange?

        /// A session opened by `hello`, attached to the connection it came over.
        init(
            user: UserID, device: String?, status: Status, text: String?, statusOrder: UInt64, ttl: Int64,
            now: BrokerTime, connection: ConnectionID?, keptByConnection: Bool = false
        ) {
            self.user = user
            self.device = device
            self.status = status
            self.text = text
            self.statusOrder = statusOrder
            self.ttl = ttl
            self.keptByConnection = keptByConnection
            self.expiresAt = now + ttl
            self.state = .attached(connection)
        }

        /// A session of the cluster's store.
        static func remote(_ description: SessionDescription, statusOrder: UInt64, now: BrokerTime) -> Session {
            var session = Session(
                user: description.user, device: description.device, status: description.status,
                text: description.text, statusOrder: statusOrder, ttl: 0, now: now, connection: nil)
            session.state = .remote
            return session
        }

        /// A placeholder for a user who was available when the previous run stopped.
        static func placeholder(
            user: UserID, status: Status, text: String?, statusOrder: UInt64, ttl: Int64, now: BrokerTime
        )
            -> Session
        {
            var session = Session(
                user: user, device: nil, status: status, text: text, statusOrder: statusOrder, ttl: ttl, now: now,
                connection: nil)
            session.state = .placeholder
            return session
        }

        /// The connection its latest request came over, while attached to one.
        var connection: ConnectionID? {
            if case .attached(let connection) = state { return connection }
            return nil
        }

        var isPlaceholder: Bool { state == .placeholder }

        var isRemote: Bool { state == .remote }

        /// Whether a request may name it: only a live session of this broker's own clients.
        var isNameable: Bool { state != .placeholder && state != .remote }

        /// Whether its TTL is suspended: kept alive by its connection and attached to a tracked one.
        var isHeldByConnection: Bool { keptByConnection && connection != nil }

        /// Why it ends when its deadline comes: a detached session because its connection closed, a placeholder
        /// because its user did not come back, an attached one because it fell silent.
        var expiryReason: OfflineReason {
            switch state {
            case .attached: .timeout
            case .detached: .closed
            case .placeholder: .restart
            case .remote: .nodeLost  // never checked: a remote session has no deadline here
            }
        }

        /// A request named it: it lives another TTL from `now`, attached to `connection` if the request came over a
        /// tracked one (else to the connection it had). Says whether it joined `connection` and which one it left. A
        /// placeholder is never renewed: no client can name it.
        mutating func renew(over connection: ConnectionID?, now: BrokerTime) -> (joined: Bool, left: ConnectionID?) {
            precondition(isNameable, "a placeholder or a remote session cannot be named by a request")
            expiresAt = now + ttl
            guard let connection, state != .attached(connection) else {
                state = .attached(self.connection)
                return (false, nil)
            }
            let left = self.connection
            state = .attached(connection)
            return (true, left)
        }

        /// Its connection closed: it waits out `grace` (never longer than its TTL) before it ends.
        mutating func detach(now: BrokerTime, grace: Int64) {
            state = .detached
            expiresAt = min(expiresAt, now + grace)
        }
    }
}
