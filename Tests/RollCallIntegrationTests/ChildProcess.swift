import Foundation
import RollCallTestSupport
import Synchronization

/// A real child process (the `rollcall` binary, python3) whose output the test reads line by line.
final class ChildProcess: Sendable {
    private let process: Process
    private let output = Mutex<(stdout: String, stderr: String, ended: Int)>(("", "", 0))
    /// Signalled on every piece of output, at the end of each pipe and when the process exits: waits sleep on it.
    private let changed = DispatchSemaphore(value: 0)

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
        let changed = changed
        process.terminationHandler = { _ in changed.signal() }
        try process.run()
        PipeReading.start(stdout.fileHandleForReading, name: "child stdout") { [weak self] data in
            self?.output.withLock {
                if let data { $0.stdout += String(decoding: data, as: UTF8.self) } else { $0.ended += 1 }
            }
            changed.signal()
        }
        PipeReading.start(stderr.fileHandleForReading, name: "child stderr") { [weak self] data in
            self?.output.withLock {
                if let data { $0.stderr += String(decoding: data, as: UTF8.self) } else { $0.ended += 1 }
            }
            changed.signal()
        }
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
        let deadline = DispatchTime.now() + .milliseconds(timeout)
        repeat {
            let all = inStderr ? stderr : stdout
            if let line = all.split(separator: "\n").first(where: { $0.contains(text) }) { return String(line) }
        } while changed.wait(timeout: deadline) == .success
        throw TestFailure("no output containing \(text) within \(timeout) ms; stdout: \(stdout) stderr: \(stderr)")
    }

    /// Waits until standard error holds `text` at least `count` times (a log line written once per event); throws
    /// after `timeout` ms.
    func waitForStderr(containing text: String, count: Int, timeout: Int = 5_000) throws {
        let deadline = DispatchTime.now() + .milliseconds(timeout)
        repeat {
            if stderr.components(separatedBy: text).count - 1 >= count { return }
        } while changed.wait(timeout: deadline) == .success
        throw TestFailure("stderr does not hold \(text) \(count) times within \(timeout) ms; stderr: \(stderr)")
    }

    /// Waits for the process to exit and returns its status, or `nil` if it is still running after `timeout` ms.
    /// Once it has exited, also waits (at most 2 s) until everything it wrote has been read, so that `stdout` and
    /// `stderr` are complete.
    func waitForExit(timeout: Int) throws -> Int32? {
        let deadline = DispatchTime.now() + .milliseconds(timeout)
        while process.isRunning {
            guard changed.wait(timeout: deadline) == .success || !process.isRunning else { return nil }
        }
        waitForOutputEnd()
        return process.terminationStatus
    }

    /// Waits until both output pipes have ended (after the process exited, all it wrote has been read); `false`
    /// after `timeout` ms, as when a child of its own still holds them open.
    @discardableResult
    func waitForOutputEnd(timeout: Int = 2_000) -> Bool {
        let deadline = DispatchTime.now() + .milliseconds(timeout)
        repeat {
            if output.withLock({ $0.ended }) == 2 { return true }
        } while changed.wait(timeout: deadline) == .success
        return output.withLock { $0.ended } == 2
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
        return (status, child.stdout, child.stderr)
    }
}
