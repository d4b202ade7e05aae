import Foundation

/// A real etcd cluster on loopback for tests and benchmarks: `members` etcd processes (Debian's etcd 3.4, unpacked
/// by `scripts/install-etcd`) on free ports, each with its own data folder under a temporary folder, joined with
/// `--initial-cluster`. Members can be killed, stopped (SIGSTOP, as a partition looks from outside), resumed and
/// restarted; ``shutdown()`` kills them all and removes the folder.
public final class EtcdCluster: @unchecked Sendable {
    /// One member: its name, its client and peer ports, and its process while it runs.
    public struct Member {
        public let name: String
        public let clientPort: Int
        public let peerPort: Int
        fileprivate var process: Process?
        /// `127.0.0.1:PORT`, as the client and `--cluster` name it.
        public var endpoint: String { "127.0.0.1:\(clientPort)" }
        public var pid: Int32? { process?.processIdentifier }
    }

    public private(set) var members: [Member]
    public private(set) var directory: URL
    public let etcd: String
    private let lock = NSLock()

    /// `etcd://HOST:PORT,...`, the value of `rollcall serve --cluster`.
    public var clusterURL: String { "etcd://" + members.map(\.endpoint).joined(separator: ",") }

    /// Starts `members` members and waits, at most `timeout`, until the cluster is healthy (it has a leader and
    /// every member answers). A cluster that is not healthy in time is killed and started again on new ports and a
    /// new folder, up to `attempts` times: a free port found here can be taken by another process before etcd binds
    /// it, and a member's first election can stall on a loaded machine.
    ///
    /// With `inMemory` (the default) the data folders are on `/dev/shm` when it has room: a test cluster needs no
    /// durability beyond its members' lifetimes (a killed member restarts on its folder all the same), and fsyncs on
    /// a shared virtual disk under a parallel test run can take seconds, longer than a raft election allows. The
    /// benchmarks pass `false` to measure etcd as it runs in production.
    public init(
        members count: Int = 3, timeout: Duration = .seconds(20), attempts: Int = 3, inMemory: Bool = true
    ) throws {
        etcd = try Self.locateEtcd()
        let base =
            inMemory
            ? Self.memoryFolder() ?? FileManager.default.temporaryDirectory
            : FileManager.default.temporaryDirectory
        members = []
        directory = base
        var failures: [String] = []
        for attempt in 1...max(1, attempts) {
            directory = base.appendingPathComponent("rollcall-etcd-\(getpid())-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let ports = try Self.freePorts(2 * count)
            members = (0..<count).map { index in
                Member(name: "m\(index)", clientPort: ports[2 * index], peerPort: ports[2 * index + 1], process: nil)
            }
            do {
                for index in members.indices { try start(index, initial: true) }
                try waitUntilHealthy(timeout: timeout)
                return
            } catch {
                failures.append("attempt \(attempt): \(error)\n\(logTails())")
                shutdown()
            }
        }
        throw SupportError(failures.joined(separator: "\n"))
    }

    deinit { shutdown() }

    // MARK: - Faults

    /// Kills member `index` with SIGKILL and waits for it to exit.
    public func kill(_ index: Int) {
        lock.lock()
        let process = members[index].process
        members[index].process = nil
        lock.unlock()
        guard let process else { return }
        Foundation.kill(process.processIdentifier, SIGCONT)
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Stops member `index` with SIGSTOP: its sockets stay open and nothing answers, as in a partition.
    public func pause(_ index: Int) {
        if let pid = members[index].pid { Foundation.kill(pid, SIGSTOP) }
    }

    /// Resumes a member stopped by ``pause(_:)``.
    public func resume(_ index: Int) {
        if let pid = members[index].pid { Foundation.kill(pid, SIGCONT) }
    }

    /// Starts member `index` again after ``kill(_:)``, on its data folder and ports.
    public func restart(_ index: Int) throws {
        guard members[index].process == nil else { return }
        try start(index, initial: false)
    }

    /// The value of `key` now (`etcdctl get`), `nil` if it is absent.
    public func value(of key: String) throws -> String? {
        let endpoints = members.indices.filter { members[$0].process != nil }.map { members[$0].endpoint }
            .joined(separator: ",")
        let output = try Self.run(etcdctl, ["--endpoints", endpoints, "get", key, "--print-value-only"])
        let value = output.hasSuffix("\n") ? String(output.dropLast()) : output
        return value.isEmpty ? nil : value
    }

    /// Compacts etcd's history up to its current revision (`etcdctl compact`): a watch or a read from an earlier
    /// revision then fails as compacted. Returns that revision.
    @discardableResult
    public func compact() throws -> Int64 {
        let endpoints = members.indices.filter { members[$0].process != nil }.map { members[$0].endpoint }
            .joined(separator: ",")
        let status = try Self.run(etcdctl, ["--endpoints", endpoints, "put", "/compact-probe", "x", "-w", "json"])
        guard let data = status.data(using: .utf8),
            let object = try JSONSerialization.jsonObject(with: data) as? [String: Any],
            let header = object["header"] as? [String: Any],
            let revision = (header["revision"] as? NSNumber)?.int64Value
        else { throw SupportError("etcdctl put printed no revision: \(status)") }
        _ = try Self.run(etcdctl, ["--endpoints", endpoints, "compact", "\(revision)", "--physical"])
        return revision
    }

    /// The index of the member that is the raft leader now, as `etcdctl endpoint status` reports it from the
    /// running members; `nil` when none says it is.
    public func leader() -> Int? {
        let running = members.indices.filter { members[$0].process != nil }
        guard
            let output = try? Self.run(
                etcdctl,
                [
                    "--endpoints", running.map { members[$0].endpoint }.joined(separator: ","),
                    "--command-timeout", "2s", "endpoint", "status", "-w", "simple",
                ])
        else { return nil }
        // One line per member: endpoint, id, version, db size, is leader, is learner, term, index, applied, errors.
        for line in output.split(separator: "\n") {
            let fields = line.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            if fields.count > 4, fields[4] == "true" {
                return members.firstIndex { $0.endpoint == fields[0] }
            }
        }
        return nil
    }

    /// Waits, at most `timeout`, until every running member answers `etcdctl endpoint health` and one of them
    /// leads.
    public func waitUntilHealthy(timeout: Duration) throws {
        let deadline = ContinuousClock.now + timeout
        var last = ""
        while ContinuousClock.now < deadline {
            let running = members.filter { $0.process != nil }.map(\.endpoint).joined(separator: ",")
            do {
                _ = try Self.run(etcdctl, ["--endpoints", running, "--command-timeout", "1s", "endpoint", "health"])
                if leader() != nil { return }
            } catch {
                last = "\(error)"
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw SupportError("etcd cluster not healthy within \(timeout): \(last)")
    }

    /// Kills every member and removes the data folders. Safe to call more than once.
    public func shutdown() {
        for index in members.indices { kill(index) }
        try? FileManager.default.removeItem(at: directory)
    }

    /// The last lines of every member's log, for a failure's message (the folder goes with ``shutdown()``).
    public func logTails(lines: Int = 15) -> String {
        members.map { member in
            let log = directory.appendingPathComponent("\(member.name).log")
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? "(no log)"
            let tail = text.split(separator: "\n").suffix(lines).joined(separator: "\n")
            return "\(member.name) (client \(member.clientPort), peer \(member.peerPort)):\n\(tail)"
        }.joined(separator: "\n")
    }

    // MARK: - Starting

    /// `/dev/shm` when it is a writable folder with at least 2 GiB free (etcd 3.4 preallocates 64 MiB of WAL per
    /// member), else `nil`.
    private static func memoryFolder() -> URL? {
        let path = "/dev/shm"
        var stats = statvfs()
        guard FileManager.default.isWritableFile(atPath: path), statvfs(path, &stats) == 0,
            UInt64(stats.f_bavail) * UInt64(stats.f_frsize) >= 2 << 30
        else { return nil }
        return URL(fileURLWithPath: path)
    }

    private var etcdctl: String {
        URL(fileURLWithPath: etcd).deletingLastPathComponent().appendingPathComponent("etcdctl").path
    }

    private func start(_ index: Int, initial: Bool) throws {
        let member = members[index]
        let peers = members.map { "\($0.name)=http://127.0.0.1:\($0.peerPort)" }.joined(separator: ",")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: etcd)
        process.arguments = [
            "--name", member.name,
            "--data-dir", directory.appendingPathComponent(member.name).path,
            "--listen-client-urls", "http://127.0.0.1:\(member.clientPort)",
            "--advertise-client-urls", "http://127.0.0.1:\(member.clientPort)",
            "--listen-peer-urls", "http://127.0.0.1:\(member.peerPort)",
            "--initial-advertise-peer-urls", "http://127.0.0.1:\(member.peerPort)",
            "--initial-cluster", peers,
            "--initial-cluster-state", initial ? "new" : "existing",
            "--initial-cluster-token", directory.lastPathComponent,
            // Faster elections than the defaults (100 ms / 1 s would do too), kept well above a loaded machine's
            // scheduling delays.
            "--heartbeat-interval", "100", "--election-timeout", "1000",
            "--logger", "zap", "--log-outputs", "stderr",
        ]
        let log = directory.appendingPathComponent("\(member.name).log")
        if !FileManager.default.fileExists(atPath: log.path) {
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        }
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        process.standardError = handle
        process.standardOutput = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        lock.lock()
        members[index].process = process
        lock.unlock()
    }

    /// The `etcd` binary: `$ROLLCALL_ETCD`, else `.build-etcd/` at the repository's root, which
    /// `scripts/install-etcd` fills (it is run here if the folder is empty and the script is there).
    public static func locateEtcd() throws -> String {
        if let path = ProcessInfo.processInfo.environment["ROLLCALL_ETCD"], !path.isEmpty { return path }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let unpacked = root.appendingPathComponent(".build-etcd/usr/bin/etcd").path
        if FileManager.default.isExecutableFile(atPath: unpacked) { return unpacked }
        let script = root.appendingPathComponent("scripts/install-etcd").path
        let output = try run(script, [])
        guard let path = output.split(separator: "\n").last.map(String.init),
            FileManager.default.isExecutableFile(atPath: path)
        else { throw SupportError("scripts/install-etcd did not give an etcd binary: \(output)") }
        return path
    }

    private static func freePorts(_ count: Int) throws -> [Int] {
        var sockets: [Int32] = []
        defer { sockets.forEach { close($0) } }
        var ports: [Int] = []
        for _ in 0..<count {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw SupportError("socket: \(errno)") }
            sockets.append(fd)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                    bind(fd, address, length) == 0 && getsockname(fd, address, &length) == 0
                }
            }
            guard bound else { throw SupportError("bind: \(errno)") }
            ports.append(Int(UInt16(bigEndian: address.sin_port)))
        }
        return ports
    }

    /// Runs a command to its end (etcdctl's own timeouts bound it); returns its standard output, throwing on a non-zero status.
    @discardableResult
    static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw SupportError("\(executable) \(arguments.joined(separator: " ")) failed: \(text)")
        }
        return text
    }
}
