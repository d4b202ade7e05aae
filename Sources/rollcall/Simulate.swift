import ArgumentParser
import Foundation
import RollCallClient
import RollCallCore

struct Simulate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run N fake users that change status R times a second, over one connection, for a while.",
        discussion: """
            Users are named PREFIX0 ... PREFIX(N-1). Each change picks a user at random and gives them another \
            status (online, away, busy or offline). Every session is heartbeated at the interval the broker asks \
            for. At the end every session says bye and one JSON line sums up what was sent.
            """)

    @OptionGroup var endpoints: Endpoints
    @Option(help: "How many users.") var users: Int = 10
    @Option(help: "Status changes a second, over all users.") var churn: Double = 10
    @Option(help: "How long to run, seconds.") var duration: Double = 10
    @Option(help: "User id prefix.") var prefix = "sim-"
    @Option(help: "Random seed, for a repeatable run.") var seed: UInt64 = 1

    func validate() throws {
        guard users > 0, users <= 100_000 else { throw ValidationError("--users must be 1 to 100000") }
        guard churn >= 0, duration > 0 else { throw ValidationError("--churn must be >= 0 and --duration > 0") }
        guard UserID(validating: "\(prefix)\(users - 1)") != nil else {
            throw ValidationError("--prefix makes invalid user ids")
        }
    }

    func run() async throws {
        let endpoint = try endpoints.command()
        let (users, churn, duration, prefix, seed) = (users, churn, duration, prefix, seed)
        do {
            try await runUntilSignalled { stop in
                var simulation = try Simulation(
                    endpoint: endpoint, users: (0..<users).map { UserID(validating: "\(prefix)\($0)")! }, seed: seed)
                try simulation.run(churn: churn, seconds: duration, stop: stop)
                emit(simulation.summary)
            }
        } catch {
            throw fail(error)
        }
    }
}

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

    init(endpoint: String, users: [UserID], seed: UInt64) throws {
        client = try CommandClient(endpoint: endpoint)
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

    mutating func run(churn: Double, seconds: Double, stop: StopFlag) throws {
        let start = ContinuousClock.now
        var heartbeatCursor = 0
        var heartbeatsDue = 0.0
        while !stop.isSet {
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

    var summary: String {
        #"{"users":\#(users.count),"changes":\#(changes),"heartbeats":\#(heartbeats),"errors":\#(errors),"seconds":\#((elapsed * 1000).rounded() / 1000)}"#
    }

    private mutating func change() {
        let index = Int(random.next() % UInt64(users.count))
        let choices = Status.allCases.filter { $0 != statuses[index] }
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

/// A small, seedable random number generator, so that a simulation can be repeated.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
