import ArgumentParser

@main
struct RollCall: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollcall",
        abstract: "A ZeroMQ presence broker: who is online, within milliseconds.",
        subcommands: [
            Serve.self, Watch.self, Online.self, Query.self, GroupCommand.self, Simulate.self, Ping.self, Bench.self,
        ]
    )
}
