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
    @OptionGroup var keys: ClientKeys
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
        let credentials = try keys.credentials()
        let (users, churn, duration, prefix, seed) = (users, churn, duration, prefix, seed)
        do {
            try await runUntilSignalled { stop in
                var simulation = try Simulation(
                    endpoint: endpoint, users: (0..<users).map { UserID(validating: "\(prefix)\($0)")! }, seed: seed,
                    credentials: credentials)
                try simulation.run(churn: churn, seconds: duration) { stop.isSet }
                emit(simulation.summary)
            }
        } catch {
            throw fail(error)
        }
    }
}
