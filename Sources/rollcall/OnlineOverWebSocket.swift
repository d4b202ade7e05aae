import Foundation
import RollCallCore
import RollCallWebSocketClient

/// `rollcall online --ws URL [--token T] USER`: the same session as over ZeroMQ, over the WebSocket endpoint.
func onlineOverWebSocket(_ url: String, token: String?, hello: PresenceCore.Hello) async throws {
    let session = try await WebSocketSession(url: url, token: token, hello: hello, onState: noteState)
    let line =
        "\(hello.user) is \(hello.status) over \(url) (session \(session.granted.session), "
        + (hello.keepAlive == .connection
            ? "kept alive by the connection)"
            : "heartbeat \(session.granted.heartbeatMilliseconds) ms, ttl \(session.granted.ttlMilliseconds) ms)")
    // The line is printed once SIGINT and SIGTERM are trapped: whoever waits for it may signal at once.
    try await runUntilSignalled { stop in
        emit(line)
        while !stop.isSet { Thread.sleep(forTimeInterval: 0.1) }
    }
    await session.close()
}
