import Foundation
import RollCallClient
import RollCallCore
import RollCallWire

/// A `rollcall serve` child process with a WebSocket endpoint, as an app meets it: killed and started again on the
/// same WebSocket port (a network that goes and comes back), its clock moved by `advance` in `--test-mode`.
final class AppBroker {
    private var child: ChildProcess
    private(set) var command: String
    private(set) var update: String
    /// `ws://127.0.0.1:PORT/v1/ws`; the same across ``restart()``.
    let url: String
    private let port: Int
    private let arguments: [String]

    /// Starts `rollcall serve` with `--ws-endpoint` on a free port (or `port`) and `arguments` added.
    init(testMode: Bool, port: Int = 0, _ arguments: [String] = []) throws {
        self.arguments = (testMode ? ["--test-mode"] : ["--ephemeral"]) + arguments
        (child, command, update, url) = try Self.start(port: port, self.arguments)
        guard let port = Int(url.split(separator: ":").last?.split(separator: "/").first ?? "") else {
            throw TestFailure("no port in \(url)")
        }
        self.port = port
    }

    private static func start(port: Int, _ arguments: [String]) throws -> (ChildProcess, String, String, String) {
        // ROLLCALL_BIN picks another broker build (as rollcall-bench's does): the SDK against a newer broker.
        let executable = ProcessInfo.processInfo.environment["ROLLCALL_BIN"].flatMap { $0.isEmpty ? nil : $0 }
        let child = try ChildProcess(
            executable ?? ChildProcess.rollcall,
            [
                "serve", "--command-endpoint", "tcp://127.0.0.1:*", "--update-endpoint", "tcp://127.0.0.1:*",
                "--ws-endpoint", "127.0.0.1:\(port)", "--print-endpoints",
            ] + arguments)
        do {
            let line = try child.waitForOutput(containing: #""ws":"#, timeout: 10_000)
            guard case .object(let fields) = try JSONParser.parse(Array(line.utf8)),
                let command = fields["command"]?.string, let update = fields["update"]?.string,
                let url = fields["ws"]?.string
            else { throw TestFailure("no endpoints in \(line)") }
            return (child, command, update, url)
        } catch {
            child.terminate()
            throw error
        }
    }

    /// A command client (ZeroMQ: the operator's side of the test).
    func client() throws -> CommandClient { try CommandClient(endpoint: command, timeoutMilliseconds: 3_000) }

    /// Moves the broker's clock (`--test-mode`): deadlines fire, heartbeats go out, records are stamped.
    func advance(_ milliseconds: Int64) throws { _ = try client().call(.advance(milliseconds: milliseconds)) }

    /// The network goes away: the broker dies with SIGKILL, so every connection is reset.
    func kill() { child.terminate() }

    /// The network comes back: a new run of the broker on the same WebSocket port (a new epoch, nothing kept).
    func restart() throws {
        child.terminate()
        (child, command, update, _) = try Self.start(port: port, arguments)
    }

    deinit { child.terminate() }
}

/// Waits, on the main actor, until `condition` holds, checking every 5 ms; throws after `timeout` ms saying `what`.
@MainActor
func eventually(
    _ what: String, timeout: Int = 5_000, _ condition: @MainActor () throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + .milliseconds(timeout)
    while try !condition() {
        guard ContinuousClock.now < deadline else { throw TestFailure("not within \(timeout) ms: \(what)") }
        try await Task.sleep(for: .milliseconds(5))
    }
}
