import Foundation

/// A `rollcall serve` child process on free loopback ports, measured from `/proc`: for benchmarks and tests.
public final class BrokerProcess {
    public let pid: Int32
    public let command: String
    public let update: String
    /// The operations endpoint's `HOST:PORT`, when `--http-endpoint` was among the arguments.
    public let http: String?
    /// What the broker logged up to `broker started`, such as `contacts file read` with its `ms`.
    public let startLog: String
    private let process: Process

    /// Starts `executable serve` with `arguments` added; returns once the broker logged its endpoints, waiting at
    /// most `startTimeout` seconds (a large `--contacts-file` is loaded before the broker starts).
    public init(executable: String, arguments: [String], startTimeout: Double = 10) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments =
            [
                "serve", "--command-endpoint", "tcp://127.0.0.1:*", "--update-endpoint", "tcp://127.0.0.1:*",
            ] + (arguments.contains { $0.hasPrefix("--data-dir") } ? [] : ["--ephemeral"]) + arguments
        let stderr = Pipe()
        process.standardError = stderr
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        self.process = process
        pid = process.processIdentifier
        // Read the start-up lines (the operations endpoint's too, if asked for: it may come after the broker's),
        // then let the rest of the log drain into nothing.
        let wantsHTTP = arguments.contains("--http-endpoint")
        var log = ""
        let deadline = Date().addingTimeInterval(startTimeout)
        while !log.contains("broker started") || (wantsHTTP && !log.contains("http endpoint listening")),
            Date() < deadline
        {
            let data = stderr.fileHandleForReading.availableData
            if data.isEmpty { break }
            log += String(decoding: data, as: UTF8.self)
        }
        PipeReading.start(stderr.fileHandleForReading, name: "broker stderr") { _ in }
        func endpoint(_ key: String, _ pattern: String = "tcp://[0-9.]+:[0-9]+") throws -> String {
            guard let range = log.range(of: "\(key)=\(pattern)", options: .regularExpression) else {
                process.terminate()
                throw SupportError("the broker did not start: \(log)")
            }
            return String(log[range].dropFirst(key.count + 1))
        }
        startLog = log
        command = try endpoint("command")
        update = try endpoint("update")
        http = wantsHTTP ? try endpoint("http", "[^\\s]+") : nil  // HOST:PORT as given, [::1]:PORT included
    }

    /// CPU seconds the broker has used so far (user + system).
    public func cpuSeconds() -> Double { ProcessStats.cpuSeconds(pid: pid) }

    /// The broker's resident memory now, in bytes.
    public func residentBytes() -> Int { ProcessStats.residentBytes(pid: pid) }

    /// Stops the broker with SIGTERM and waits for it.
    /// Stops the broker with SIGTERM and waits for it; one stopped by a test (SIGSTOP) is continued first, and one
    /// that has not exited within 10 s is killed, so that a failing test's clean-up never hangs.
    public func stop() {
        guard process.isRunning else { return }
        Foundation.kill(pid, SIGCONT)
        process.terminate()
        let deadline = ContinuousClock.now + .seconds(10)
        while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        kill()
    }

    /// Stops the broker's process with SIGSTOP and returns once the kernel has stopped it (state `T` in
    /// `/proc/<pid>/stat`): a request sent afterwards waits in its socket. Throws after 5 s.
    public func freeze() throws {
        Foundation.kill(pid, SIGSTOP)
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
            // The state follows the command name in parentheses, which may itself hold spaces or parentheses.
            if let close = stat.lastIndex(of: ")"), stat[close...].dropFirst(2).first == "T" { return }
            usleep(1_000)
        }
        throw BrokerProcessError.notFrozen(pid: pid)
    }

    /// Kills the broker with SIGKILL (no shutdown of any kind, as when its host dies) and waits for it.
    public func kill() {
        guard process.isRunning else { return }
        Foundation.kill(pid, SIGKILL)
        process.waitUntilExit()
    }

    /// Whether the process still runs.
    public var isRunning: Bool { process.isRunning }
}

/// Readings from `/proc/<pid>`.
public enum ProcessStats {
    /// utime + stime of a process, in seconds.
    public static func cpuSeconds(pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        // Fields after the command name: state is field 3; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// VmRSS of a process, in bytes.
    public static func residentBytes(pid: Int32) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return 0 }
        return (Int(line.split(separator: " ")[1]) ?? 0) * 1_024
    }
}

/// Why a test-support tool failed: a broker that did not start, a request that failed or went unanswered.
public struct SupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Why a broker process did not do what a test asked of it.
public enum BrokerProcessError: Error, CustomStringConvertible {
    case notFrozen(pid: Int32)

    public var description: String {
        switch self {
        case .notFrozen(let pid): "broker process \(pid) not stopped within 5 s of SIGSTOP"
        }
    }
}
