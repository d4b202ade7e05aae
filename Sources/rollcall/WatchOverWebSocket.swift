import Foundation
import RollCallCore
import RollCallWebSocketClient
import RollCallWire

/// `rollcall watch --ws URL [--token T]`: the same JSON lines as over ZeroMQ, from the WebSocket endpoint.
func watchOverWebSocket(_ url: String, token: String?, users: [UserID], all: Bool) async throws {
    let watcher = WebSocketWatcher(url: url, token: token, users: users, all: all)
    let ended = StopFlag()
    let running = Task {
        defer { ended.set() }
        try await watcher.run(
            onRecord: { record in emit(String(decoding: Codec.encodeRecord(record), as: UTF8.self)) },
            onEvent: { event in
                switch event {
                case .connected: note("connected to \(url)")
                case .lost(let code, let retry):
                    note("connection lost (close \(code.map(String.init) ?? "none")); retrying in \(retry) ms")
                }
            })
    }
    try await runUntilSignalled { stop in
        while !stop.isSet && !ended.isSet { Thread.sleep(forTimeInterval: 0.1) }
    }
    let expired = ended.isSet  // run() returns by itself only when the token expired
    running.cancel()
    if case .failure(let error) = await running.result, !(error is CancellationError) { throw error }
    if expired { note("the token expired (4001): get a fresh one") }
}
