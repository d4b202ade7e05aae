import ArgumentParser
import Foundation

/// `rollcall bench ARGS` runs `rollcall-bench ARGS` from this executable's directory: the benchmarks are their own
/// executable, so that the broker's binary does not carry them.
struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure a broker: runs rollcall-bench, built beside this executable, with these arguments.",
        discussion: "rollcall bench presence --help and rollcall bench groups --help list the scenarios.")

    @Argument(parsing: .captureForPassthrough, help: "Arguments for rollcall-bench, such as `presence --smoke`.")
    var arguments: [String] = []

    func run() throws {
        let own = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let bench = own.deletingLastPathComponent().appendingPathComponent("rollcall-bench").path
        guard FileManager.default.isExecutableFile(atPath: bench) else {
            throw ValidationError("\(bench) is not built: swift build -c release --product rollcall-bench")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: bench)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw ExitCode(process.terminationStatus) }
    }
}
