import Foundation
import RollCallClient
import RollCallCore
import RollCallStore
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

/// A free loopback TCP port, found by binding port 0 and letting it go.
func freeEndpoint() throws -> String {
    let context = try Context()
    let socket = try Socket(context, .pull)
    try socket.bind("tcp://127.0.0.1:*")
    let endpoint = try socket.lastEndpoint()
    socket.close()
    context.terminate()
    return endpoint
}

/// `rollcall serve` on fixed endpoints and a data directory, so it can be killed and started again on the same.
final class ServeProcess {
    let command: String
    let update: String
    let dataDirectory: String
    let extra: [String]
    private(set) var child: ChildProcess?

    init(extra: [String] = []) throws {
        command = try freeEndpoint()
        update = try freeEndpoint()
        dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-\(UUID())").path
        self.extra = extra
    }

    func start() throws {
        let child = try ChildProcess(
            ChildProcess.rollcall,
            ["serve", "--command-endpoint", command, "--update-endpoint", update, "--data-dir", dataDirectory]
                + extra)
        try child.waitForOutput(containing: "broker started", inStderr: true)
        self.child = child
    }

    /// What the broker has written to its database so far, read over a connection of the test's own (WAL lets it
    /// read beside the broker's). Opening makes the file if it is missing: check that it exists first if it matters.
    func stored() throws -> StoredState { try SQLiteStore(directory: dataDirectory).load() }

    /// Whether the database holds `user`'s record and it satisfies `matching`.
    func stored(_ user: String, _ matching: (PresenceRecord) -> Bool = { _ in true }) -> Bool {
        guard let state = try? stored() else { return false }
        return state.records.contains { $0.user.rawValue == user && matching($0) }
    }

    func signal(_ signal: Int32) -> Int32? {
        child?.signal(signal)
        return try? child?.waitForExit(timeout: 5_000)
    }

    deinit {
        child?.terminate()
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }
}

extension Integration {
    @Suite("Broker faults: kill -9 and SIGTERM with persistence")
    struct BrokerFaultTests {
        /// After kill -9 of the broker and a restart on the same data: a user whose client rides through is never
        /// shown offline, a user whose client is gone goes offline with reason restart one TTL after the restart,
        /// groups are back, seqs never go back, and a change older than the write interval is kept.
        @Test func killNineAndRestart() async throws {
            let broker = try ServeProcess(extra: ["--ttl-ms", "2000"])
            try broker.start()
            let online = try ChildProcess(
                ChildProcess.rollcall, ["online", "alice", "--status", "busy", "--command-endpoint", broker.command])
            defer { online.terminate() }
            let client = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 1_000)
            let bob = try client.hello(.init(user: "bob".id, text: "kept")).session
            _ = try client.group("pair".group, GroupEdit(members: ["alice".id, "bob".id]))
            let watcher = try PresenceWatcher(endpoint: broker.update)
            defer { watcher.close() }
            let seen = Mutex<[PresenceRecord]>([])
            for user in ["alice", "bob"] { _ = watcher.observe(user.id) { r in seen.withLock { $0.append(r) } } }
            try await waitFor(seconds: 5) {
                seen.withLock { $0.contains { $0.user == "alice".id && $0.status == .busy } }
            }
            try client.setStatus(bob, .away, text: "kept")
            try await waitFor(seconds: 5) { broker.stored("bob") { $0.status == .away && $0.text == "kept" } }

            #expect(broker.signal(SIGKILL) == nil || true)
            let killed = ContinuousClock.now
            try broker.start()
            let restarted = milliseconds(since: killed)
            let after = try CommandClient(endpoint: broker.command, timeoutMilliseconds: 1_000)
            #expect(try after.query(["bob".id])["bob".id]?.status == .away)
            #expect(try after.group("pair".group).members.map(\.user) == ["alice".id, "bob".id])
            try await waitFor(seconds: 5) { seen.withLock { $0.contains { $0.reason == .restart } } }
            let offline = milliseconds(since: killed) - restarted
            try await waitFor(seconds: 5) {
                (try? after.query(["alice".id]))?["alice".id].map { $0.sessions == 1 && $0.status == .busy } ?? false
            }
            let records = seen.withLock { $0 }.filter { $0.seq > 0 }  // not the never-seen value on subscribe
            print(
                "kill -9 of serve: restarted in \(Int(restarted)) ms; bob offline (restart) \(Int(offline)) ms after "
                    + "(ttl 2000); alice records \(records.filter { $0.user == "alice".id }.map(\.status.rawValue))")
            #expect(!records.contains { $0.user == "alice".id && $0.status == .offline })
            #expect(records.filter { $0.status == .offline }.map(\.user) == ["bob".id])
            #expect(offline < 2_000 + 500)
            for user in ["alice", "bob"] {
                let seqs = records.filter { $0.user == user.id }.map(\.seq).filter { $0 > 0 }
                #expect(seqs == seqs.sorted(), "\(user) seqs went back: \(seqs)")
            }
        }

        /// SIGTERM loses nothing: a change made just before it is there after the restart, and the broker exits 0.
        @Test func sigtermAndRestart() async throws {
            let broker = try ServeProcess(extra: ["--write-interval-ms", "60000"])
            try broker.start()
            let client = try CommandClient(endpoint: broker.command)
            let session = try client.hello(.init(user: "cara".id)).session
            try client.setStatus(session, .busy, text: "just before")
            #expect(broker.signal(SIGTERM) == 0)
            try broker.start()
            let record = try CommandClient(endpoint: broker.command).query(["cara".id])["cara".id]
            #expect(record?.status == .busy && record?.text == "just before")
        }
    }
}
