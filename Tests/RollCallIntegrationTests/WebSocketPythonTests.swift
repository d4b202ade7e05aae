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
