import Foundation
import RollCallBroker
import RollCallClient
import RollCallCore
import Testing

/// `rollcall serve` started through bash, for what only a shell sets up (a file-size limit).
private func serveInShell(_ prelude: String, _ serve: ServeProcess) throws -> ChildProcess {
    let arguments =
        [
            "serve", "--command-endpoint", serve.command, "--update-endpoint", serve.update, "--data-dir",
            serve.dataDirectory,
        ] + serve.extra
    let quoted = ([ChildProcess.rollcall] + arguments).map { "'\($0)'" }.joined(separator: " ")
    let child = try ChildProcess("/bin/bash", ["-c", "\(prelude); exec \(quoted)"])
    try child.waitForOutput(containing: "broker started", inStderr: true)
    return child
}

/// Lines of `text` that are not empty.
private func lines(_ text: String) -> [Substring] { text.split(separator: "\n") }

extension Integration {
    @Suite("Operator faults: signals, settings, store failures, restarts")
    struct OperatorFaultTests {
        /// SIGHUP (a closing terminal), SIGUSR1, SIGUSR2, SIGALRM and SIGPIPE leave the broker running; a group
        /// defined just before them is kept by the final write of the SIGTERM that follows.
        @Test func signalsThatDoNotStopLoseNothing() async throws {
            let serve = try ServeProcess(extra: ["--write-interval-ms", "60000"])  // only the final write keeps it
            try serve.start()
            let client = try CommandClient(endpoint: serve.command)
            _ = try client.group("team".group, GroupEdit(members: ["a".id, "b".id]))
            for signal in [SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGPIPE] { serve.child?.signal(signal) }
            // Each signal but SIGPIPE is noted as it is handled.
            try await waitFor(seconds: 5) {
                lines(serve.child?.stderr ?? "").filter { $0.contains("still running") }.count == 4
            }
            #expect(try serve.child?.waitForExit(timeout: 0) == nil, "the broker ended on a signal")
            #expect(try client.ping().broker.isEmpty == false)
            #expect(serve.signal(SIGTERM) == 0)
            let notes = lines(serve.child?.stderr ?? "").filter { $0.contains("still running") }
            print("signals: \(notes.count) noted, broker kept running, exit 0 on SIGTERM")
            #expect(notes.count == 4)  // SIGPIPE is ignored without a word

            try serve.start()
            let kept = try CommandClient(endpoint: serve.command).group("team".group)
            #expect(kept.members.map(\.user) == ["a".id, "b".id])
        }

        /// A reader of the broker's stderr that goes away does not kill it, at debug level (a line per request)
        /// nor at shutdown: requests are answered, SIGTERM exits 0, and the last changes are kept.
        @Test func vanishedLogReaderIsNotFatal() async throws {
            let serve = try ServeProcess(extra: ["--write-interval-ms", "60000", "--log-level", "debug"])
            let process = Process()
            process.executableURL = URL(fileURLWithPath: ChildProcess.rollcall)
            process.arguments =
                [
                    "serve", "--command-endpoint", serve.command, "--update-endpoint", serve.update, "--data-dir",
                    serve.dataDirectory,
                ] + serve.extra
            let stderr = Pipe()
            process.standardError = stderr
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            var log = ""
            let deadline = ContinuousClock.now + .seconds(10)
            while !log.contains("broker started"), ContinuousClock.now < deadline {
                log += String(decoding: stderr.fileHandleForReading.availableData, as: UTF8.self)
            }
            try stderr.fileHandleForReading.close()  // the reader goes away: every later log write gets EPIPE
            try stderr.fileHandleForWriting.close()
            let client = try CommandClient(endpoint: serve.command)
            for index in 0..<20 { _ = try client.hello(.init(user: "u\(index)".id)) }
            _ = try client.group("kept".group, GroupEdit(members: ["u1".id]))
            kill(process.processIdentifier, SIGTERM)
            let stop = ContinuousClock.now
            try await waitFor(seconds: 5) { !process.isRunning }
            #expect(!process.isRunning)
            #expect(process.terminationReason == .exit && process.terminationStatus == 0)
            print("log reader gone: exit \(process.terminationStatus) after \(Int(milliseconds(since: stop))) ms")

            try serve.start()
            #expect(try CommandClient(endpoint: serve.command).group("kept".group).members.map(\.user) == ["u1".id])
        }

        /// "Never" values, and a port past 65535, are refused at start: one line naming the setting, a non-zero
        /// exit, nothing bound.
        @Test(arguments: [
            "--max-ttl-ms", "--offline-grace-ms", "--write-interval-ms", "--group-batch-ms", "--ttl-ms",
            "--broker-heartbeat-ms", "--max-message-bytes", "--heartbeat-ms", "--max-sessions", "--update-hwm",
        ])
        func neverSettingsAreRefused(_ flag: String) async throws {
            let value = flag == "--update-hwm" ? "2147483647" : "9223372036854775807"
            let run = try await ChildProcess.run(ChildProcess.rollcall, ["serve", "--ephemeral", flag, value])
            #expect(run.status != 0)
            #expect(lines(run.stderr).count == 1, "not one line: \(run.stderr)")
            #expect(run.stderr.hasPrefix("rollcall: \(flag) must be"), "\(run.stderr)")
        }

        /// A TCP port outside 1...65535 is refused instead of being bound modulo 65536.
        @Test func portOutOfRangeIsRefused() async throws {
            let run = try await ChildProcess.run(
                ChildProcess.rollcall, ["serve", "--ephemeral", "--command-endpoint", "tcp://127.0.0.1:99999"])
            #expect(run.status != 0)
            #expect(lines(run.stderr).count == 1)
            #expect(run.stderr.contains("--command-endpoint must be tcp://HOST:PORT"))
        }

        /// The in-process broker checks the same ranges: an embedder cannot start one that would overflow.
        @Test func embeddedBrokerValidatesItsConfiguration() throws {
            var configuration = BrokerConfiguration()
            configuration.presence.maxTTLMilliseconds = .max
            #expect(throws: ConfigurationError.self) {
                try Broker(configuration: configuration, logger: .init(label: "t"))
            }
            configuration = BrokerConfiguration()
            #expect(throws: Never.self) { try configuration.validate() }
        }

        /// Every client subcommand reports a bad argument as one line on stderr and a non-zero exit.
        @Test(arguments: [
            ["query", "not a user"], ["watch"], ["online", "bad user"], ["group", "bad group!"],
            ["ping", "--command-endpoint", "nonsense"], ["query"], ["no-such-command"],
        ])
        func clientErrorsAreOneLine(_ arguments: [String]) async throws {
            let run = try await ChildProcess.run(ChildProcess.rollcall, arguments)
            #expect(run.status != 0)
            #expect(lines(run.stderr).count == 1, "\(arguments): \(run.stderr)")
            #expect(run.stderr.hasPrefix("rollcall: "))
        }

        /// When the store cannot write (here a file-size limit: the disk is "full"), presence in memory stays
        /// right, and a SIGTERM whose final write fails exits non-zero so that supervisors see the failure.
        @Test func failedFinalWriteExitsNonZero() async throws {
            let serve = try ServeProcess(extra: ["--write-interval-ms", "50"])
            let child = try serveInShell("ulimit -f 200", serve)
            defer { child.terminate() }
            let client = try CommandClient(endpoint: serve.command)
            for index in 0..<400 {
                _ = try client.hello(
                    .init(user: "u\(index)".id, text: String(repeating: "x", count: 250), ttlMilliseconds: 600_000))
            }
            try child.waitForOutput(containing: "store write failed", inStderr: true, timeout: 5_000)
            #expect(try client.query(["u399".id])["u399".id]?.status == .online)
            let start = ContinuousClock.now
            child.signal(SIGTERM)
            let status = try child.waitForExit(timeout: 5_000)
            print(
                "store full: exit \(status.map(String.init) ?? "none") \(Int(milliseconds(since: start))) ms after SIGTERM"
            )
            #expect(status != nil && status != 0)
            #expect(child.stderr.contains("changes could not be written before shutdown"))
        }

        /// A database file deleted under the running broker is noticed within two seconds, said loudly, and made
        /// anew with the whole state: a restart finds what was there before the deletion and what came after.
        @Test func deletedDatabaseIsMadeAnew() async throws {
            let serve = try ServeProcess(extra: ["--write-interval-ms", "50"])
            try serve.start()
            let client = try CommandClient(endpoint: serve.command)
            _ = try client.hello(.init(user: "before".id, ttlMilliseconds: 600_000))
            _ = try client.group("g".group, GroupEdit(members: ["before".id, "after".id]))
            try await waitFor(seconds: 5) {  // written
                serve.stored("before") && ((try? serve.stored())?.groups.contains { $0.members.count == 2 } ?? false)
            }
            let file = serve.dataDirectory + "/rollcall.sqlite3"
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: file + suffix) }
            let deleted = ContinuousClock.now
            try serve.child?.waitForOutput(containing: "deleted or replaced", inStderr: true, timeout: 3_000)
            let noticed = milliseconds(since: deleted)
            print("deleted database: noticed after \(Int(noticed)) ms")
            #expect(noticed < 2_500)
            _ = try client.hello(.init(user: "after".id, ttlMilliseconds: 600_000))
            // The new file holds both users (checked for existence first: opening it would make it).
            try await waitFor(seconds: 5) {
                FileManager.default.fileExists(atPath: file) && serve.stored("before") && serve.stored("after")
            }
            #expect(serve.signal(SIGTERM) == 0)

            try serve.start()
            let again = try CommandClient(endpoint: serve.command)
            let records = try again.query(["before".id, "after".id])
            #expect(records["before".id]?.seq ?? 0 > 0)
            #expect(records["after".id]?.seq ?? 0 > 0)
            #expect(try again.group("g".group).members.count == 2)
        }

        /// After a kill -9 right after a burst of changes, nothing the restarted broker publishes or answers has a
        /// seq lower than one a subscriber already saw.
        @Test func seqNeverGoesBackAfterKillNine() async throws {
            let serve = try ServeProcess(extra: ["--write-interval-ms", "200"])
            try serve.start()
            let subscriber = try PresenceSubscriber(endpoint: serve.update)
            try subscriber.subscribe("burst".id)
            _ = try subscriber.expect("burst") { _ in true }
            let client = try CommandClient(endpoint: serve.command)
            let session = try client.hello(.init(user: "burst".id, ttlMilliseconds: 600_000)).session
            try await waitFor(seconds: 5) { serve.stored("burst") }  // the hello is written
            for index in 0..<200 { try client.setStatus(session, index.isMultiple(of: 2) ? .busy : .away) }
            let highest = try subscriber.expect("burst") { $0.status == .away }.seq
            #expect(serve.signal(SIGKILL) != nil)

            try serve.start()
            let replay = try PresenceSubscriber(endpoint: serve.update)
            try replay.subscribe("burst".id)
            let restored = try replay.expect("burst") { _ in true }
            let queried = try CommandClient(endpoint: serve.command).query(["burst".id])["burst".id]
            print("kill -9 after a burst: highest seen \(highest), restored \(restored.seq)")
            #expect(restored.seq > highest)
            #expect((queried?.seq ?? 0) > highest)
        }

        /// A status text changed to the same letters in another Unicode form is published with the new bytes.
        @Test func textInAnotherUnicodeFormIsPublished() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("uni")
                let client = try broker.client()
                let session = try client.hello(.init(user: "uni".id, text: "caf\u{E9}")).session
                _ = try subscriber.expect("uni") { $0.status == .online }
                try client.setStatus(session, .online, text: "cafe\u{301}")
                let record = try subscriber.expect("uni") { _ in true }
                #expect(Array(record.text?.utf8 ?? "".utf8) == Array("cafe\u{301}".utf8))
            }
        }

        /// The README's first command works as root without sudo and for any python3: it runs the install script,
        /// which exists, is executable, parses, and never calls sudo as root; and the python3 on this PATH (the
        /// one the interop tests run) imports pyzmq.
        @Test func readmeCommandsNeedNeitherSudoNorDebiansPython() async throws {
            let root = ChildProcess.repositoryRoot
            let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
            let firstCommand = try #require(
                readme.split(separator: "\n").first { $0.hasSuffix("swift run -c release rollcall serve") })
            #expect(firstCommand.hasPrefix("scripts/install-dependencies && "), "\(firstCommand)")
            #expect(!firstCommand.contains("sudo"))
            let script = root.appendingPathComponent("scripts/install-dependencies").path
            #expect(FileManager.default.isExecutableFile(atPath: script))
            let syntax = try await ChildProcess.run("/bin/bash", ["-n", script])
            #expect(syntax.status == 0, "\(syntax.stderr)")
            let text = try String(contentsOfFile: script, encoding: .utf8)
            #expect(text.contains("if [ \"$(id -u)\" -eq 0 ]; then\n    as_root=()"))
            let python = try await ChildProcess.run("/usr/bin/env", ["python3", "-c", "import zmq"])
            #expect(python.status == 0, "python3 on the PATH cannot import zmq: \(python.stderr)")
        }
    }
}
