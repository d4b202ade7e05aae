import Foundation
import RollCallClient
import RollCallCore
import RollCallWire
import Testing

extension Integration {
    @Suite("The rollcall executable")
    struct ProcessTests {
        /// Starts `rollcall serve` on free ports (the command endpoint through its environment variable) and returns
        /// the process with the endpoints it logged.
        func serve(_ extra: [String] = []) async throws -> (ChildProcess, command: String, update: String) {
            let child = try ChildProcess(
                ChildProcess.rollcall,
                ["serve", "--update-endpoint", "tcp://127.0.0.1:*"] + (extra.isEmpty ? ["--ephemeral"] : extra),
                environment: ["ROLLCALL_COMMAND_ENDPOINT": "tcp://127.0.0.1:*"])
            let line = try child.waitForOutput(containing: "broker started", inStderr: true)
            func endpoint(_ key: String) throws -> String {
                guard let range = line.range(of: "\(key)=tcp://[0-9.]+:[0-9]+", options: .regularExpression) else {
                    throw TestFailure("no \(key) endpoint in: \(line)")
                }
                return String(line[range].dropFirst(key.count + 1))
            }
            return (child, try endpoint("command"), try endpoint("update"))
        }

        /// SIGTERM and SIGINT stop `rollcall serve` cleanly: exit status 0 within a second.
        @Test(arguments: [SIGTERM, SIGINT])
        func serveStopsCleanly(on signal: Int32) async throws {
            let (broker, command, _) = try await serve()
            defer { broker.terminate() }
            let client = try CommandClient(endpoint: command)
            _ = try client.hello(.init(user: "zoe".id))
            #expect(try client.ping().version == "0.1.0")
            let start = ContinuousClock.now
            broker.signal(signal)
            let status = try broker.waitForExit(timeout: 1_000)
            print(
                "serve: exit \(status.map(String.init) ?? "none") \(Int(milliseconds(since: start))) ms after signal \(signal)"
            )
            #expect(status == 0)
        }

        /// A bad setting is one clear error line and a non-zero exit, before anything is bound.
        @Test func serveRejectsBadSettings() async throws {
            let ttl = try await ChildProcess.run(
                ChildProcess.rollcall, ["serve", "--ephemeral", "--ttl-ms", "500", "--min-ttl-ms", "1000"])
            #expect(ttl.status != 0)
            #expect(ttl.stderr.contains("--ttl-ms (500) must lie between --min-ttl-ms (1000)"))
            let endpoint = try await ChildProcess.run(
                ChildProcess.rollcall, ["serve", "--ephemeral", "--command-endpoint", "tcp://nowhere"])
            #expect(endpoint.status != 0)
            #expect(endpoint.stderr.contains("--command-endpoint must be tcp://HOST:PORT"))
            // A well-formed address this host does not have (TEST-NET-1): the bind fails, nothing is sent.
            let bind = try await ChildProcess.run(
                ChildProcess.rollcall,
                ["serve", "--ephemeral", "--insecure", "--command-endpoint", "tcp://192.0.2.1:7730"])
            #expect(bind.status != 0)
            #expect(bind.stderr.contains("cannot bind tcp://192.0.2.1:7730"))
        }

        /// The tour of the README: `watch` sees `online` come up, and go offline within 3 s of its `kill -9` (in
        /// practice at once: the connection closes).
        @Test func watchOnlineAndKill() async throws {
            let (broker, command, update) = try await serve()
            defer { broker.terminate() }
            let watch = try ChildProcess(ChildProcess.rollcall, ["watch", "hana", "--update-endpoint", update])
            defer { watch.terminate() }
            try watch.waitForOutput(containing: #""user":"hana""#)  // the last value: never seen
            let online = try ChildProcess(
                ChildProcess.rollcall,
                ["online", "hana", "--status", "busy", "--text", "demo", "--command-endpoint", command])
            defer { online.terminate() }
            let line = try watch.waitForOutput(containing: #""status":"busy""#)
            #expect(line.contains(#""text":"demo""#))
            online.signal(SIGKILL)
            let killed = ContinuousClock.now
            let offline = try watch.waitForOutput(containing: #""reason":"closed""#, timeout: 4_000)
            print("watch saw offline \(Int(milliseconds(since: killed))) ms after kill -9 of rollcall online")
            #expect(milliseconds(since: killed) < 3_000)
            let record = try Codec.decodeRecord(Array(offline.utf8))
            #expect(record.status == .offline)

            // `query` prints one JSON line per user, `ping` answers, and SIGINT makes `watch` exit 0.
            let query = try await ChildProcess.run(
                ChildProcess.rollcall, ["query", "hana", "ivan", "--command-endpoint", command])
            #expect(query.status == 0)
            let records = try query.stdout.split(separator: "\n").map { try Codec.decodeRecord(Array($0.utf8)) }
            #expect(records.map(\.user.rawValue) == ["hana", "ivan"])
            #expect(records[0].reason == .closed && records[1].seq == 0)
            watch.signal(SIGINT)
            #expect(try watch.waitForExit(timeout: 2_000) == 0)
        }

        /// `online` says bye when interrupted, so watchers see a logout at once rather than a timeout.
        @Test func onlineSaysByeOnSIGINT() async throws {
            try await withBroker { broker in
                let subscriber = try broker.subscriber("jay")
                let online = try ChildProcess(
                    ChildProcess.rollcall, ["online", "jay", "--command-endpoint", broker.command])
                defer { online.terminate() }
                try subscriber.expect("jay", timeout: 5_000) { $0.status == .online }
                online.signal(SIGINT)
                #expect(try subscriber.expect("jay", timeout: 2_000) { $0.status == .offline }.reason == .bye)
                #expect(try online.waitForExit(timeout: 2_000) == 0)
            }
        }

        /// `simulate` drives N users at the asked churn and leaves nobody online.
        @Test func simulateChurns() async throws {
            try await withBroker { broker in
                let everyone = try PresenceSubscriber(endpoint: broker.update)
                try everyone.subscribeAll()
                // Subscriptions are read in order: a later exact topic's last value shows presence/ is live.
                try everyone.subscribe("probe".id)
                try everyone.expect("probe") { _ in true }
                let run = try await ChildProcess.run(
                    ChildProcess.rollcall,
                    [
                        "simulate", "--users", "50", "--churn", "500", "--duration", "1", "--command-endpoint",
                        broker.command,
                    ])
                #expect(run.status == 0)
                let summary = try JSONParser.parse(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
                guard case .object(let fields) = summary else { throw TestFailure("summary is not an object") }
                #expect(fields["users"]?.integer == 50)
                // How close it came to the asked rate is a figure (a loaded machine makes fewer), not a rule: every
                // user changed, and every change the simulation counts was answered.
                let changes = fields["changes"]?.integer ?? 0
                print("simulate: \(changes) changes in 1 s at an asked 500/s")
                #expect(changes >= 50)
                #expect(fields["errors"]?.integer == 0)
                // Every simulated user's latest record reaches the subscriber, and it is offline.
                var latest: [String: PresenceRecord] = [:]
                var records = 0
                let deadline = ContinuousClock.now + .seconds(5)
                while !(latest.count == 50 && latest.values.allSatisfy { $0.status == .offline }),
                    ContinuousClock.now < deadline
                {
                    guard let record = try everyone.next(timeout: 20), record.user.rawValue.hasPrefix("sim-") else {
                        continue
                    }
                    latest[record.user.rawValue] = record
                    records += 1
                }
                #expect(latest.count == 50 && latest.values.allSatisfy { $0.status == .offline })
                #expect(records >= 50)
                let users = (0..<50).map { "sim-\($0)".id }
                let final = try broker.client().query(users)
                #expect(final.values.allSatisfy { $0.sessions == 0 && $0.status == .offline })
            }
        }

        /// Client commands print one clear line on stderr and exit non-zero when the broker does not answer.
        @Test func clientErrorsAreOneLine() async throws {
            let run = try await ChildProcess.run(
                ChildProcess.rollcall, ["ping", "--command-endpoint", "tcp://127.0.0.1:1"], timeout: 5_000)
            #expect(run.status == 1)
            #expect(run.stderr.split(separator: "\n").count == 1)
            #expect(run.stderr.contains("no reply to ping"))
        }

        /// The Python example in docs/ goes online, watches itself and goes offline, speaking the protocol with pyzmq.
        @Test func pythonExampleInterop() async throws {
            let script = ChildProcess.repositoryRoot.appendingPathComponent("docs/examples/presence.py").path
            try await withBroker { broker in
                let run = try await ChildProcess.run(
                    "/usr/bin/env", ["python3", script, broker.command, broker.update, "py-kim"])
                #expect(run.status == 0, "stderr: \(run.stderr)")
                let records = try run.stdout.split(separator: "\n").compactMap { line -> PresenceRecord? in
                    line.hasPrefix("{") ? try Codec.decodeRecord(Array(line.utf8)) : nil
                }
                #expect(records.contains { $0.user.rawValue == "py-kim" && $0.status == .online })
                #expect(records.contains { $0.user.rawValue == "py-kim" && $0.status == .offline && $0.reason == .bye })
            }
        }

        /// The Python group example defines a group of five with three online and sees "3 of 5" then "2 of 5".
        @Test func pythonGroupExampleInterop() async throws {
            let script = ChildProcess.repositoryRoot.appendingPathComponent("docs/examples/group.py").path
            try await withBroker { broker in
                let run = try await ChildProcess.run(
                    "/usr/bin/env", ["python3", script, broker.command, broker.update, "py-team"])
                #expect(run.status == 0, "stderr: \(run.stderr)")
                #expect(run.stdout.contains("py-team: 3 of 5 online"))
                #expect(run.stdout.contains("py-team: 2 of 5 online"))
            }
        }

        /// The broker's binary carries no benchmark code: it lives in `rollcall-bench`, which `rollcall bench` runs.
        @Test func benchmarksAreTheirOwnExecutable() async throws {
            let symbols = try await ChildProcess.run("/usr/bin/nm", [ChildProcess.rollcall], timeout: 30_000)
            #expect(symbols.status == 0)
            #expect(symbols.stdout.contains("RollCallBroker"))  // nm read the binary
            #expect(!symbols.stdout.contains("RollCallBench"))
            let help = try await ChildProcess.run(ChildProcess.rollcall, ["bench", "presence", "--help"])
            #expect(help.status == 0)
            #expect(help.stdout.contains("rollcall-bench presence"))
        }

        /// `rollcall keygen PATH` writes a secret certificate with mode 0600 in czmq's format and prints its public
        /// key; it never overwrites a file, and says so in one line.
        @Test func keygenWritesAPrivateCertificate() async throws {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("key-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: path) }
            let run = try await ChildProcess.run(ChildProcess.rollcall, ["keygen", path])
            #expect(run.status == 0)
            let publicKey = run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(publicKey.utf8.count == 40)
            let text = try String(contentsOfFile: path, encoding: .utf8)
            #expect(text.contains("public-key = \"\(publicKey)\""))
            #expect(text.contains("secret-key = \""))
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let again = try await ChildProcess.run(ChildProcess.rollcall, ["keygen", path])
            #expect(again.status != 0)
            #expect(again.stderr.contains("exists already") && again.stderr.split(separator: "\n").count == 1)
            #expect(try String(contentsOfFile: path, encoding: .utf8) == text)
        }
    }
}
