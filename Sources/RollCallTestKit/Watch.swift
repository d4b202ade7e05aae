import RollCallClient
import RollCallWire
import ZeroMQ

/// A subscriber to some users, with expectations that wait with a deadline and fail with what was seen instead.
/// Belongs to one thread.
public final class Watch {
    private let subscriber: PresenceSubscriber
    /// Every record received so far, in order, by user.
    public private(set) var seen: [UserID: [PresenceRecord]] = [:]

    init(endpoint: String, users: [UserID]) throws {
        subscriber = try PresenceSubscriber(endpoint: endpoint)
        for user in users {
            try subscriber.subscribe(user)
            // The last value proves the subscription is live; it is not news, so it is not kept.
            _ = try next(of: user, within: 3_000) { _ in true }
        }
        seen = [:]
    }

    /// Waits up to `within` ms (real time) for a record of `user` that matches every field given; returns it.
    @discardableResult
    public func expect(
        _ user: String, status: Status? = nil, reason: OfflineReason? = nil, text: String? = nil,
        sessions: Int? = nil, within milliseconds: Int = 1_000
    ) throws -> PresenceRecord {
        let id = try TestBroker.id(user)
        let wanted = [
            status.map { "status \($0)" }, reason.map { "reason \($0)" }, text.map { "text '\($0)'" },
            sessions.map(Self.sessions),
        ].compactMap { $0 }.joined(separator: ", ")
        let found = try next(of: id, within: milliseconds) { record in
            (status == nil || record.status == status) && (reason == nil || record.reason == reason)
                && (text == nil || record.text == text) && (sessions == nil || record.sessions == sessions)
        }
        guard let found else {
            throw TestKitFailure(
                "no record of \(user) with \(wanted.isEmpty ? "any fields" : wanted) within \(milliseconds) ms; seen: "
                    + Self.describe(seen[id] ?? []))
        }
        return found
    }

    /// Fails if any record of `user` not read yet arrives within `within` ms: no flicker, no news. Records already
    /// published and not yet read by an ``expect`` count too, so expect what you know is coming first.
    public func expectNothing(_ user: String, within milliseconds: Int = 200) throws {
        let id = try TestBroker.id(user)
        let before = seen[id]?.count ?? 0
        _ = try next(of: id, within: milliseconds) { _ in false }
        let arrived = (seen[id] ?? []).dropFirst(before)
        guard arrived.isEmpty else {
            throw TestKitFailure(
                "expected nothing for \(user) within \(milliseconds) ms; seen: \(Self.describe(Array(arrived)))")
        }
    }

    /// Reads records until one of `user` satisfies `matching` or the time is up; keeps every one it reads.
    private func next(of user: UserID, within milliseconds: Int, _ matching: (PresenceRecord) -> Bool) throws
        -> PresenceRecord?
    {
        let deadline = ContinuousClock.now + .milliseconds(milliseconds)
        while case let left = ContinuousClock.now.duration(to: deadline), left > .zero {
            let wait = max(
                1, Int(left.components.seconds * 1_000 + left.components.attoseconds / 1_000_000_000_000_000))
            guard let record = try subscriber.next(timeout: wait) else { break }
            seen[record.user, default: []].append(record)
            if record.user == user && matching(record) { return record }
        }
        return nil
    }

    /// "1 session", "2 sessions".
    static func sessions(_ count: Int) -> String { count == 1 ? "1 session" : "\(count) sessions" }

    static func describe(_ records: [PresenceRecord]) -> String {
        guard !records.isEmpty else { return "nothing" }
        return records.map { record in
            "\(record.status)" + (record.reason.map { " (\($0))" } ?? "") + (record.text.map { " '\($0)'" } ?? "")
                + " " + sessions(record.sessions)
        }.joined(separator: "; ")
    }
}

/// A subscriber to one group's topic, with an expectation on its aggregate. Belongs to one thread.
public final class GroupWatch {
    public let group: GroupID
    private let context: Context
    private let socket: Socket
    /// Every aggregate received so far, latest last.
    public private(set) var seen: [StatusCounts] = []

    init(endpoint: String, group: GroupID) throws {
        self.group = group
        context = try .shared()
        socket = try Socket(context, .sub)
        try socket.set(.linger(milliseconds: 0))
        try socket.set(.subscribe(Topic.group(group).bytes))
        try socket.connect(endpoint)
        guard try next(within: 3_000, { _ in true }) != nil else {
            throw TestKitFailure("no aggregate of group \(group) arrived on subscribe")
        }
    }

    /// Waits up to `within` ms for an aggregate with `online` available members (online, busy or away) out of
    /// `total`; the latest aggregate may already be it.
    @discardableResult
    public func expect(online: Int, total: Int, within milliseconds: Int = 1_000) throws -> StatusCounts {
        if let last = seen.last, last.available == online, last.total == total { return last }
        guard let counts = try next(within: milliseconds, { $0.available == online && $0.total == total }) else {
            throw TestKitFailure(
                "group \(group): expected \(online) of \(total) online within \(milliseconds) ms; seen: "
                    + (seen.isEmpty ? "nothing" : seen.map { "\($0.available) of \($0.total)" }.joined(separator: ", "))
            )
        }
        return counts
    }

    private func next(within milliseconds: Int, _ matching: (StatusCounts) -> Bool) throws -> StatusCounts? {
        let deadline = ContinuousClock.now + .milliseconds(milliseconds)
        var poller = Poller([socket])
        while case let left = ContinuousClock.now.duration(to: deadline), left > .zero {
            let wait = max(
                1, Int(left.components.seconds * 1_000 + left.components.attoseconds / 1_000_000_000_000_000))
            guard try poller.poll(timeout: wait)[0] else { break }
            while let (frames, _) = try socket.receiveMessage() {
                // A viewer's copy (protocol §8.2.1) is not this watch's: it sees the truth.
                guard frames.count == 2, ReceivedTopic(frames[0].bytes)?.isFor(nil) == true,
                    let update = try? Codec.decodeGroupUpdate(frames[1].bytes), !update.deleted
                else { continue }
                seen.append(update.counts)
                if matching(update.counts) { return update.counts }
            }
        }
        return nil
    }
}
