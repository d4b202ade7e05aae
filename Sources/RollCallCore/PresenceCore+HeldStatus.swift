import HeapModule

/// Held status changes (`status` with `after_ms`): a change that takes effect only if its session says nothing else
/// about its status for a while. An app going to the background sends one, so that a phone suspended a moment later
/// still goes offline on time, and one that comes back within the window shows no change at all.
extension PresenceCore {
    /// The longest a change may be held: ten minutes.
    public static let maxHoldMilliseconds: Int64 = 600_000

    /// A change a session asked for, to take effect at `due` unless the session asks for another status first.
    struct HeldChange: Sendable, Equatable {
        var status: Status
        var text: String?
        var due: BrokerTime
    }

    /// Holds a change of a session's status and text for `after` milliseconds (1 to ``maxHoldMilliseconds``).
    /// It replaces any change the session already holds; one that would leave the session as it is cancels the held
    /// change instead and holds nothing. The session is renewed as by any request. Answers whether a change is now
    /// held; nothing is published until it comes due (``tick(now:)``).
    public mutating func holdStatus(
        session id: SessionID, status: Status, text: String?, after: Int64, connection: ConnectionID? = nil,
        now: BrokerTime
    ) -> Outcome<Bool> {
        guard (1...Self.maxHoldMilliseconds).contains(after) else {
            return .failure(.badRequest, "after_ms must be from 1 to \(Self.maxHoldMilliseconds), not \(after)")
        }
        if let error = validate(text: text) { return Outcome(.failure(error)) }
        guard touch(id, connection: connection, now: now) != nil else {
            return .failure(.unknownSession, "session \(id) is unknown or has ended; say hello again")
        }
        let text = normalized(text)
        guard sessions[id]!.status != status || !sameBytes(sessions[id]!.text, text) else {
            sessions[id]!.held = nil
            return Outcome(.success(false))
        }
        let due = now + after
        sessions[id]!.held = HeldChange(status: status, text: text, due: due)
        heldChanges.insert(ExpiryCheck(at: due, session: id))
        compactHeldChangesIfStale()
        return Outcome(.success(true))
    }

    /// Makes every held change due by `now` take effect, in the order they came due; returns the records to
    /// publish. A change whose session ended, or that a later request replaced or cancelled, is skipped.
    mutating func applyHeldChanges(now: BrokerTime) -> [PresenceRecord] {
        var records: [PresenceRecord] = []
        while let check = heldChanges.min, check.at <= now {
            heldChanges.removeMin()
            guard let held = sessions[check.session]?.held, held.due == check.at else { continue }
            sessions[check.session]!.held = nil
            records += change(check.session, to: held.status, text: held.text, now: now)
        }
        return records
    }

    /// Entries in the heap of held changes, those of replaced holds included: what the compaction bounds.
    public var heldChangeCount: Int { heldChanges.count }

    /// Replaced and cancelled holds leave their entries in the heap until they come due: rebuilds it from the live
    /// holds when stale entries outnumber them, so that a client re-holding a change in a loop cannot grow it.
    private mutating func compactHeldChangesIfStale() {
        guard heldChanges.count > 2 * sessions.count + 1_024 else { return }
        heldChanges = Heap(
            sessions.compactMap { id, session in session.held.map { ExpiryCheck(at: $0.due, session: id) } })
    }
}
