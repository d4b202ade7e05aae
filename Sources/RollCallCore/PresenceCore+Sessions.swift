/// The session events: hello, heartbeat, status, bye, and the loss of a connection.
extension PresenceCore {
    /// What `hello` asks for.
    public struct Hello: Sendable, Equatable {
        public var user: UserID
        public var device: String?
        public var status: Status
        public var text: String?
        /// The TTL the client asks for; `nil` for the broker's default. It is clamped to the configured bounds.
        public var ttlMilliseconds: Int64?
        /// What keeps the session alive (``KeepAlive``).
        public var keepAlive: KeepAlive

        public init(
            user: UserID, device: String? = nil, status: Status = .online, text: String? = nil,
            ttlMilliseconds: Int64? = nil, keepAlive: KeepAlive = .requests
        ) {
            self.user = user
            self.device = device
            self.status = status
            self.text = text
            self.ttlMilliseconds = ttlMilliseconds
            self.keepAlive = keepAlive
        }
    }

    /// What `hello` grants.
    public struct Granted: Sendable, Equatable {
        public var session: SessionID
        public var heartbeatMilliseconds: Int64
        public var ttlMilliseconds: Int64

        public init(session: SessionID, heartbeatMilliseconds: Int64, ttlMilliseconds: Int64) {
            self.session = session
            self.heartbeatMilliseconds = heartbeatMilliseconds
            self.ttlMilliseconds = ttlMilliseconds
        }
    }

    /// Opens session `id` (made unguessable by the caller) for a user.
    public mutating func hello(
        _ hello: Hello, session id: SessionID, connection: ConnectionID? = nil, now: BrokerTime
    ) -> Outcome<Granted> {
        if let error = validate(text: hello.text) { return Outcome(.failure(error)) }
        if let device = hello.device, device.utf8.count > configuration.maxDeviceLength {
            return .failure(.badRequest, "device is longer than \(configuration.maxDeviceLength) bytes")
        }
        if let ttl = hello.ttlMilliseconds, ttl <= 0 {
            return .failure(.badRequest, "ttl_ms must be a positive number of milliseconds")
        }
        guard sessions[id] == nil else {
            return .failure(.badRequest, "session id \(id) is already in use")
        }

        // Placeholders kept for users from before a restart give way to this hello: they count for no limit. An
        // invisible hello leaves them to run out as `restart`, as if it had not come.
        let placeholders =
            hello.status == .invisible
            ? [] : users[hello.user]?.sessions.filter { sessions[$0]?.isPlaceholder == true } ?? []
        guard sessions.count - placeholderCount < configuration.maxSessions else {
            return .failure(.limit, "the broker holds its maximum of \(configuration.maxSessions) sessions")
        }
        let held = (users[hello.user]?.sessions.count ?? 0) - placeholders.count
        guard held < configuration.maxSessionsPerUser else {
            return .failure(
                .limit, "user \(hello.user) already holds the maximum of \(configuration.maxSessionsPerUser) sessions")
        }

        let ttl = min(
            max(hello.ttlMilliseconds ?? configuration.defaultTTLMilliseconds, configuration.minTTLMilliseconds),
            configuration.maxTTLMilliseconds)
        // A user back after a restart takes the place of the placeholder that kept them available.
        for placeholder in placeholders { sessions[placeholder] = nil }
        placeholderCount -= placeholders.count
        users[hello.user]?.sessions.removeAll { placeholders.contains($0) }
        statusChanges += 1
        sessions[id] = Session(
            user: hello.user, device: hello.device, status: hello.status, text: normalized(hello.text),
            statusOrder: statusChanges, ttl: ttl, now: now, connection: connection,
            keptByConnection: hello.keepAlive == .connection)
        if hello.status == .invisible { invisibleSessionCount += 1 }
        users[hello.user, default: User()].sessions.append(id)
        if recordsSessionEvents { sessionEvents.append(.opened(id, hello.user, connection: connection)) }
        if let connection { connections[connection, default: []].insert(id) }
        expiries.insert(ExpiryCheck(at: now + ttl, session: id))

        let granted = Granted(
            session: id, heartbeatMilliseconds: max(1, min(configuration.heartbeatMilliseconds, ttl / 3)),
            ttlMilliseconds: ttl)
        return Outcome(.success(granted), updates: refresh(hello.user, now: now, reason: .status))
    }

    /// Keeps a session alive. Every request that names a live session does the same.
    public mutating func heartbeat(
        session id: SessionID, connection: ConnectionID? = nil, now: BrokerTime
    ) -> Outcome<Void> {
        guard touch(id, connection: connection, now: now) != nil else { return unknownSession(id) }
        return Outcome(.success(()))
    }

    /// Sets a session's status and custom text; both are replaced, so an omitted text clears the line.
    public mutating func setStatus(
        session id: SessionID, status: Status, text: String?, connection: ConnectionID? = nil, now: BrokerTime
    ) -> Outcome<Void> {
        if let error = validate(text: text) { return Outcome(.failure(error)) }
        guard touch(id, connection: connection, now: now) != nil else { return unknownSession(id) }
        // A status asked for now replaces one the session held for later (PresenceCore+HeldStatus.swift).
        sessions[id]!.held = nil
        return Outcome(.success(()), updates: change(id, to: status, text: normalized(text), now: now))
    }

    /// Sets live session `id`'s status and text; returns the record to publish if its user's record changed.
    mutating func change(_ id: SessionID, to status: Status, text: String?, now: BrokerTime) -> [PresenceRecord] {
        guard let session = sessions[id], session.status != status || !sameBytes(session.text, text) else {
            return []
        }
        statusChanges += 1
        if session.status == .invisible { invisibleSessionCount -= 1 }
        if status == .invisible { invisibleSessionCount += 1 }
        sessions[id]!.status = status
        sessions[id]!.text = text
        sessions[id]!.statusOrder = statusChanges
        if recordsSessionEvents { sessionEvents.append(.changed(id, session.user)) }
        // Going invisible looks to others exactly like that session saying bye.
        return refresh(session.user, now: now, reason: status == .invisible ? .bye : .status)
    }

    /// Ends a session at once (logout).
    public mutating func bye(session id: SessionID, now: BrokerTime) -> Outcome<Void> {
        guard let session = sessions[id], session.isNameable else { return unknownSession(id) }
        let user = session.user
        return Outcome(.success(()), updates: end([id], of: user, now: now, reason: .bye))
    }

    /// Ends live session `id` for a reason the broker decides, not the client or the clock: a node of a cluster whose
    /// change to the session could not be written to the cluster's store (docs/cluster.md). Nothing if there is no
    /// such session.
    public mutating func end(session id: SessionID, reason: OfflineReason, now: BrokerTime) -> [Action] {
        guard let session = sessions[id], session.isNameable else { return [] }
        return end([id], of: session.user, now: now, reason: reason).map(Action.publish)
    }

    /// The sessions whose latest request came over `connection` lose it. Without a grace period they end at once
    /// (reason `closed`); with one, they end when it runs out unless a request names them first, over any
    /// connection. Sessions that had moved to another connection are not touched (fencing).
    public mutating func connectionClosed(_ connection: ConnectionID, now: BrokerTime) -> [Action] {
        guard let ids = connections.removeValue(forKey: connection) else { return [] }
        let grace = configuration.offlineGraceMilliseconds
        var byUser: [UserID: [SessionID]] = [:]
        for id in ids {
            guard var session = sessions[id] else { continue }
            if grace > 0 {
                session.detach(now: now, grace: grace)
                if recordsSessionEvents { sessionEvents.append(.detached(id, session.user)) }
                sessions[id] = session
                expiries.insert(ExpiryCheck(at: session.expiresAt, session: id))
            } else {
                byUser[session.user, default: []].append(id)
            }
        }
        return byUser.keys.sorted().flatMap { user in end(byUser[user]!, of: user, now: now, reason: .closed) }
            .map(Action.publish)
    }

    /// Ends at once, with `reason`, the live sessions whose latest request came over `connection`, which is about to
    /// be closed by the broker, not the client: a connection whose CURVE key was revoked (`revoked`). No grace
    /// period applies, and the connection's later close ends nothing. Sessions that had moved to another connection
    /// are not touched.
    public mutating func endSessions(
        onConnection connection: ConnectionID, reason: OfflineReason, now: BrokerTime
    ) -> [Action] {
        guard let ids = connections.removeValue(forKey: connection) else { return [] }
        var byUser: [UserID: [SessionID]] = [:]
        for id in ids {
            guard let session = sessions[id], session.isNameable else { continue }
            byUser[session.user, default: []].append(id)
        }
        return byUser.keys.sorted().flatMap { user in end(byUser[user]!, of: user, now: now, reason: reason) }
            .map(Action.publish)
    }

    /// What others may know of live session `id` (its user, device, status and text), or `nil` if there is no such
    /// session of this broker's clients: what a cluster node writes to the cluster's store.
    public func description(of id: SessionID) -> SessionDescription? {
        guard let session = sessions[id], session.isNameable else { return nil }
        return SessionDescription(
            user: session.user, device: session.device, status: session.status, text: session.text)
    }

    /// The user of live session `id`, or `nil` if there is no such session: whose session a request touches.
    public func user(of id: SessionID) -> UserID? {
        guard let session = sessions[id], session.isNameable else { return nil }
        return session.user
    }

    // MARK: Helpers

    /// Renews a live session and moves it to `connection`; returns its user, or `nil` if it is not live.
    mutating func touch(_ id: SessionID, connection: ConnectionID?, now: BrokerTime) -> UserID? {
        guard var session = sessions[id], session.isNameable else { return nil }
        let move = session.renew(over: connection, now: now)
        if let left = move.left { removeFromConnection(left, id) }
        if move.joined, let connection {
            connections[connection, default: []].insert(id)
            if recordsSessionEvents { sessionEvents.append(.moved(id, session.user, from: move.left, to: connection)) }
        }
        sessions[id] = session
        return session.user
    }

    /// Ends `ids`, all sessions of `user`, and returns the record to publish if the user changed.
    /// `counted`: the caller already counted each session's own reason in ``sessionsEnded``.
    mutating func end(
        _ ids: [SessionID], of user: UserID, now: BrokerTime, reason: OfflineReason, counted: Bool = false
    ) -> [PresenceRecord] {
        for id in ids {
            guard let session = sessions.removeValue(forKey: id) else { continue }
            if !counted { sessionsEnded[reason, default: 0] += 1 }
            if recordsSessionEvents && !counted { sessionEvents.append(.ended(id, user, reason)) }
            if let connection = session.connection { removeFromConnection(connection, id) }
            if session.isPlaceholder { placeholderCount -= 1 }
            if session.status == .invisible { invisibleSessionCount -= 1 }
        }
        users[user]?.sessions.removeAll { ids.contains($0) }
        compactExpiriesIfStale()
        return refresh(user, now: now, reason: reason)
    }

    private mutating func removeFromConnection(_ connection: ConnectionID, _ id: SessionID) {
        connections[connection]?.remove(id)
        if connections[connection]?.isEmpty == true { connections[connection] = nil }
    }

    private func unknownSession(_ id: SessionID) -> Outcome<Void> {
        .failure(.unknownSession, "session \(id) is unknown or has ended; say hello again")
    }

    func validate(text: String?) -> PresenceError? {
        guard let text, text.unicodeScalars.count > configuration.maxTextLength else { return nil }
        return PresenceError(.badRequest, "text is longer than \(configuration.maxTextLength) characters")
    }

    func normalized(_ text: String?) -> String? {
        guard let text, !text.isEmpty else { return nil }
        return text
    }
}

extension PresenceCore {
    /// What keeps a session alive.
    public enum KeepAlive: String, Sendable, Equatable {
        /// Its requests (heartbeats or any other): it ends when none names it for its TTL. The default.
        case requests = "ttl"
        /// Its connection: while attached to a tracked connection (a WebSocket, a ZeroMQ TCP connection) its TTL does
        /// not run out, so an idle client sends nothing; it ends when the connection closes (at once, or after the
        /// grace period), by `bye`, or, once detached, by its TTL. Over a transport the broker cannot track it is
        /// the same as ``requests``.
        case connection
    }
}
