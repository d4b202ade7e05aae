import Foundation
import Synchronization

/// A real child process (the `rollcall` binary, python3) whose output the test reads line by line.
final class ChildProcess: Sendable {
    private let process: Process
    private let output = Mutex<(stdout: String, stderr: String)>(("", ""))

    /// Starts `executable` with `arguments`; extra environment variables are added to this process's own.
    init(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = FileHandle.nullDevice
        self.process = process
        stdout.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let text = String(decoding: handle.availableData, as: UTF8.self)
            self?.output.withLock { $0.stdout += text }
        }
        stderr.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let text = String(decoding: handle.availableData, as: UTF8.self)
            self?.output.withLock { $0.stderr += text }
        }
        try process.run()
    }

    /// The built `rollcall` executable, next to the test bundle.
    static var rollcall: String {
        let testBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return testBinary.deletingLastPathComponent().appendingPathComponent("rollcall").path
    }

    /// The repository root, for files such as the Python example.
    static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
    }

    var pid: Int32 { process.processIdentifier }
    var stdout: String { output.withLock { $0.stdout } }
    var stderr: String { output.withLock { $0.stderr } }

    func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits until standard output or error holds `text`; returns the matching line or throws after `timeout` ms.
    @discardableResult
    func waitForOutput(containing text: String, inStderr: Bool = false, timeout: Int = 5_000) throws -> String {
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while ContinuousClock.now < deadline {
            let all = inStderr ? stderr : stdout
            if let line = all.split(separator: "\n").first(where: { $0.contains(text) }) { return String(line) }
            pause(milliseconds: 5)
        }
        throw TestFailure("no output containing \(text) within \(timeout) ms; stdout: \(stdout) stderr: \(stderr)")
    }

    /// Waits for the process to exit and returns its status, or `nil` if it is still running after `timeout` ms.
    func waitForExit(timeout: Int) throws -> Int32? {
        let deadline = ContinuousClock.now + .milliseconds(timeout)
        while process.isRunning {
            guard ContinuousClock.now < deadline else { return nil }
            pause(milliseconds: 5)
        }
        return process.terminationStatus
    }

    /// Kills the process if it still runs; for clean-up after a failed test.
    func terminate() {
        if process.isRunning { signal(SIGKILL) }
        process.waitUntilExit()
    }
}

extension ChildProcess {
    /// Runs to completion and returns the exit status, failing after `timeout` ms.
    static func run(_ executable: String, _ arguments: [String], timeout: Int = 10_000) async throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        let child = try ChildProcess(executable, arguments)
        guard let status = try child.waitForExit(timeout: timeout) else {
            child.terminate()
            throw TestFailure("\(executable) \(arguments) did not finish within \(timeout) ms")
        }
        // Give the pipe handlers a moment to deliver the last bytes.
        pause(milliseconds: 50)
        return (status, child.stdout, child.stderr)
    }
}
