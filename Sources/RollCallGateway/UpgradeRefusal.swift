import NIOCore

/// Answers a refused upgrade with its own status before the upgrade, and closes the connection.
///
/// hummingbird-websocket 2.8.1 answers every upgrade its `shouldUpgrade` declines with 400 Bad Request
/// (`HTTP1WebSocketUpgradeChannel.writeFailedUpgrade`). RollCall's clients need 401 for a token to renew and 503 for a
/// full server, so the answer is written here, at the front of the pipeline (past the HTTP codec, which is busy with
/// the upgrade), and the connection closed; the library's own 400 then finds it closed and is dropped.
enum UpgradeRefusal {
    /// Writes `HTTP/1.1 <status>` with an empty body on `channel`, then closes it.
    static func refuse(_ channel: any Channel, status: Int, reason: String, extraHeader: String? = nil) {
        let head =
            "HTTP/1.1 \(status) \(reason)\r\nConnection: close\r\nContent-Length: 0\r\n"
            + (extraHeader.map { "\($0)\r\n" } ?? "") + "\r\n"
        channel.eventLoop.execute {
            let front = Front()
            do {
                try channel.pipeline.syncOperations.addHandler(front, position: .first)
                let context = try channel.pipeline.syncOperations.context(handler: front)
                context.writeAndFlush(NIOAny(ByteBuffer(string: head))).whenComplete { _ in
                    channel.close(promise: nil)
                }
            } catch {
                channel.close(promise: nil)
            }
        }
    }

    /// A handler that only gives access to the front of the pipeline.
    private final class Front: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
    }
}
