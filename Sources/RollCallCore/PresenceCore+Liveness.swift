import HeapModule

/// Liveness: sessions that stop talking for their TTL end.
extension PresenceCore {
    /// Does what time brings by `now`: ends every session whose TTL, grace period or placeholder has run out,
    /// applies the held status changes that came due (a session that ended first drops its own), then flushes every
    /// group whose batch window has closed. Returns the records and group messages to publish.
    public mutating func tick(now: BrokerTime) -> [Action] {
        var actions = expire(now: now).map(Action.publish)
        if let due = heldChanges.min?.at, due <= now { actions += applyHeldChanges(now: now).map(Action.publish) }
        return actions + flushGroups(now: now).map(Action.publishGroup)
    }

    /// Ends every session whose deadline has come by `now`; returns the records to publish.
    mutating func expire(now: BrokerTime) -> [PresenceRecord] {
        var expired: [UserID: [SessionID]] = [:]
        var reasons: [UserID: OfflineReason] = [:]
        while let check = expiries.min, check.at <= now {
            expiries.removeMin()
            guard var session = sessions[check.session], !session.isRemote else { continue }  // ended, or not ours
            if session.expiresAt > now {
                expiries.insert(ExpiryCheck(at: session.expiresAt, session: check.session))
            } else if session.isHeldByConnection {
                // Its connection keeps it alive: checked again a TTL later, so a detach finds a check in the heap.
                session.expiresAt = now + session.ttl
                sessions[check.session] = session
                expiries.insert(ExpiryCheck(at: session.expiresAt, session: check.session))
            } else {
                expired[session.user, default: []].append(check.session)
                sessionsEnded[session.expiryReason, default: 0] += 1
                if recordsSessionEvents {
                    sessionEvents.append(.ended(check.session, session.user, session.expiryReason))
                }
                if session.expiryReason != .timeout { reasons[session.user] = session.expiryReason }
            }
        }
        // A session whose connection closed and whose grace ran out ended because of the close, and a restart's
        // placeholder because its user did not come back; the rest because they fell silent.
        return expired.keys.sorted().flatMap { user in
            end(expired[user]!, of: user, now: now, reason: reasons[user] ?? .timeout, counted: true)
        }
    }
}

extension PresenceCore {
    /// The checks of ended sessions stay in the heap until they come due. Rebuilds it from the live sessions when
    /// they outnumber the live ones, so that clients who churn sessions with long TTLs cannot grow it without bound.
    mutating func compactExpiriesIfStale() {
        guard expiries.count > 2 * (sessions.count - remoteSessionCount) + 1_024 else { return }
        expiries = Heap(
            sessions.filter { !$0.value.isRemote }.map { ExpiryCheck(at: $0.value.expiresAt, session: $0.key) })
    }
}
