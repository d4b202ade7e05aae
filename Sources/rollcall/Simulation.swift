import Foundation
import RollCallClient
import RollCallCore

/// The fake users of `simulate` and their sessions.
struct Simulation {
    let client: CommandClient
    let users: [UserID]
    var sessions: [SessionID]
    var statuses: [Status]
    var heartbeatMilliseconds: Int64
    var random: SplitMix64
    var changes = 0
    var heartbeats = 0
    var errors = 0
    var elapsed = 0.0

    /// Opens a session for each of `users` over one connection to `endpoint`.
    init(endpoint: String, users: [UserID], seed: UInt64, credentials: CurveCredentials? = nil) throws {
        client = try CommandClient(endpoint: endpoint, credentials: credentials)
        self.users = users
        random = SplitMix64(seed: seed)
        statuses = Array(repeating: .online, count: users.count)
        sessions = []
        heartbeatMilliseconds = 1_000
        for user in users {
            let granted = try client.hello(.init(user: user))
            sessions.append(granted.session)
            heartbeatMilliseconds = granted.heartbeatMilliseconds
        }
    }

    /// Changes statuses `churn` times a second and heartbeats every session, for `seconds` or until `stop` says so;
    /// then says bye for every session.
    mutating func run(churn: Double, seconds: Double, stop: () -> Bool) throws {
        let start = ContinuousClock.now
        var heartbeatCursor = 0
        var heartbeatsDue = 0.0
        while !stop() {
            let now = ContinuousClock.now - start
            elapsed = Double(now.components.seconds) + Double(now.components.attoseconds) / 1e18
            if elapsed >= seconds { break }
            while Double(changes) < churn * elapsed { change() }
            // Heartbeats spread evenly: every session once per interval.
            heartbeatsDue = elapsed * 1_000 / Double(heartbeatMilliseconds) * Double(users.count)
            while Double(heartbeats) < heartbeatsDue {
                beat(heartbeatCursor)
                heartbeatCursor = (heartbeatCursor + 1) % users.count
            }
            Thread.sleep(forTimeInterval: 0.002)
        }
        for session in sessions { try? client.bye(session) }
    }

    /// One JSON line: users, changes, heartbeats, errors, seconds.
    var summary: String {
        #"{"users":\#(users.count),"changes":\#(changes),"heartbeats":\#(heartbeats),"errors":\#(errors),"seconds":\#((elapsed * 1000).rounded() / 1000)}"#
    }

    private mutating func change() {
        let index = Int(random.next() % UInt64(users.count))
        let choices = Status.published.filter { $0 != statuses[index] }
        let status = choices[Int(random.next() % UInt64(choices.count))]
        changes += 1
        let (client, session) = (client, sessions[index])
        call(index) { try client.setStatus(session, status) }
        statuses[index] = status
    }

    private mutating func beat(_ index: Int) {
        heartbeats += 1
        let (client, session) = (client, sessions[index])
        call(index) { try client.heartbeat(session) }
    }

    /// Runs a call for user `index`, saying hello again if the session was lost.
    private mutating func call(_ index: Int, _ body: () throws -> Void) {
        do {
            try body()
        } catch ClientError.rejected(let error) where error.code == .unknownSession {
            errors += 1
            if let granted = try? client.hello(.init(user: users[index], status: statuses[index])) {
                sessions[index] = granted.session
            }
        } catch {
            errors += 1
        }
    }
}
