import ArgumentParser
import Foundation

@main
struct RollCall: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollcall",
        abstract: "A ZeroMQ presence broker: who is online, within milliseconds.",
        subcommands: [
            Serve.self, Watch.self, Online.self, Query.self, GroupCommand.self, Simulate.self, Ping.self, Advance.self,
            Keygen.self,
            Bench.self,
        ]
    )

    /// Runs the subcommand; any error is one line on standard error and a non-zero exit status, as the README
    /// promises (ArgumentParser would add the usage lines to a validation error). Help and version requests print
    /// in full.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var command = command as? AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            guard code != .success, !(error is ExitCode) else { exit(withError: error) }
            let message = message(for: error).split(separator: "\n").first.map(String.init) ?? "\(error)"
            FileHandle.standardError.write(Data("rollcall: \(message)\n".utf8))
            Foundation.exit(code.rawValue)
        }
    }
}
