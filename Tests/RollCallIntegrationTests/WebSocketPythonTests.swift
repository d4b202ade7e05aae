import Foundation
import RollCallCore
import RollCallWire
import Testing

extension Integration {
    @Suite("WebSocket interop (Python websockets)")
    struct WebSocketPythonTests {
        static var script: String {
            ChildProcess.repositoryRoot.appendingPathComponent("docs/examples/websocket.py").path
        }

        /// The Python WebSocket example, with a token made in the test, follows its user, goes online kept alive by
        /// its connection, is refused a hello as another user (`forbidden`), and goes offline by bye; a ZeroMQ
        /// subscriber sees the same records.
        @Test func pythonClientSessionAndForbidden() async throws {
            try await withGateway { gateway in
                let watch = try gateway.broker.subscriber("py-ws")
                let token = try await gateway.token("py-ws")
                let run = try await ChildProcess.run(
                    "/usr/bin/env", ["python3", Self.script, gateway.url, token, "py-ws"], timeout: 15_000)
                #expect(run.status == 0, "stderr: \(run.stderr)")
                #expect(run.stdout.contains("other user: forbidden"))
                let online = try watch.expect("py-ws") { $0.status == .online }
                let offline = try watch.expect("py-ws") { $0.status == .offline }
                #expect(offline.reason == .bye)
                // The same record bytes as the ZeroMQ subscriber decoded: its seq is in the Python client's output.
                #expect(run.stdout.contains(#""seq":\#(online.seq)"#))
            }
        }

        /// A Python WebSocket client killed with SIGKILL while its session is kept alive by its connection is shown
        /// offline (reason `closed`) at once.
        @Test func killedPythonClientGoesOffline() async throws {
            try await withGateway { gateway in
                let watch = try gateway.broker.subscriber("py-kill")
                let token = try await gateway.token("py-kill")
                let child = try ChildProcess(
                    "/usr/bin/env", ["python3", Self.script, gateway.url, token, "py-kill", "hold"])
                defer { child.terminate() }
                _ = try child.waitForOutput(containing: "holding", timeout: 10_000)
                try watch.expect("py-kill") { $0.status == .online }
                let started = ContinuousClock.now
                child.signal(SIGKILL)
                let record = try watch.expect("py-kill", timeout: 5_000) { $0.status == .offline }
                let took = milliseconds(since: started)
                print("offline \(took) ms after SIGKILL of the Python client")
                #expect(record.reason == .closed)
                #expect(took < 3_000)
            }
        }
    }
}

extension Integration {
    @Suite("rollcall watch --ws")
    struct WatchOverWebSocketTests {
        /// `rollcall watch --ws URL --token T USER` (RollCallWebSocketClient, which does not link libzmq) prints the
        /// user's current record, then each change made over ZeroMQ, as the same JSON lines as `watch` over ZeroMQ;
        /// SIGINT ends it with 0.
        @Test func watchPrintsRecordsOverWebSocket() async throws {
            try await withGateway { gateway in
                let token = try await gateway.token("watcher")
                let watch = try ChildProcess(
                    ChildProcess.rollcall, ["watch", "--ws", gateway.url, "--token", token, "amy"])
                defer { watch.terminate() }
                let first = try watch.waitForOutput(containing: #""user":"amy""#, timeout: 10_000)
                #expect(first.contains(#""status":"offline""#))
                let client = try gateway.broker.client()
                let session = try client.hello(.init(user: "amy".id, status: .busy, text: "over ws")).session
                let online = try watch.waitForOutput(containing: #""text":"over ws""#, timeout: 10_000)
                let record = try Codec.decodeRecord(Array(online.utf8))
                #expect(record.status == .busy)
                #expect(try client.query(["amy".id])["amy".id]?.seq == record.seq)
                try client.bye(session)
                watch.signal(SIGINT)
                #expect(try watch.waitForExit(timeout: 10_000) == 0)
                print("watch --ws printed: \(watch.stdout.split(separator: "\n").count) lines")
            }
        }
    }
}
