import Foundation
import RollCallBroker
import RollCallCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension Integration {
    @Suite("WebSocket handshake and frame bounds")
    struct WebSocketHandshakeTests {
        /// A connection that sends nothing, or half an upgrade request, is closed within --ws-handshake-timeout-ms;
        /// an upgraded connection is not.
        @Test func halfFinishedUpgradesAreClosed() async throws {
            let bound = 500
            try await withGateway(tokens: false, { $0.webSocket.handshakeMilliseconds = Int64(bound) }) { gateway in
                let started = ContinuousClock.now
                let silent = try RawWebSocket(port: gateway.port, path: nil)
                let half = try RawWebSocket(port: gateway.port, path: nil)
                try half.sendRaw(Array("GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: webs".utf8))
                let upgraded = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                #expect(try upgraded.status() == 101)
                let silentRead = silent.readUntilClosed(timeout: 10_000)
                let silentTook = milliseconds(since: started)
                let halfRead = half.readUntilClosed(timeout: 10_000)
                let halfTook = milliseconds(since: started)
                print(
                    "with a \(bound) ms bound: silent connection closed after \(Int(silentTook)) ms, half a request "
                        + "after \(Int(halfTook)) ms")
                #expect(silentRead == [])
                #expect(halfRead == [])
                #expect(silentTook >= Double(bound) * 0.9)
                #expect(silentTook < Double(bound) + 3_000)
                #expect(halfTook < Double(bound) + 3_000)
                // The upgraded one is still open well past the bound (its ping interval is 10 s).
                #expect(upgraded.readUntilClosed(timeout: bound * 2) == nil)
            }
        }

        /// Past --ws-max-pending-upgrades, a new connection is closed at once, before anything is read; once a
        /// pending one goes, a new connection is upgraded again.
        @Test func pendingUpgradesAreCapped() async throws {
            try await withGateway(
                tokens: false,
                {
                    $0.webSocket.maxPendingUpgrades = 2
                    $0.webSocket.handshakeMilliseconds = 20_000
                }
            ) { gateway in
                var waiting = [
                    try RawWebSocket(port: gateway.port, path: nil), try RawWebSocket(port: gateway.port, path: nil),
                ]
                // Connections are accepted in the order they came: both are counted before the third.
                let started = ContinuousClock.now
                let third = try RawWebSocket(port: gateway.port, path: nil)
                let read = third.readUntilClosed(timeout: 5_000)
                let took = milliseconds(since: started)
                print("a third connection with 2 pending upgrades allowed: closed after \(Int(took)) ms")
                #expect(read == [])
                #expect(took < 3_000)
                #expect(waiting[0].readUntilClosed(timeout: 200) == nil)  // the first two wait on
                waiting.removeFirst().kill()
                // The count drops once the server sees the close; a fresh upgrade then succeeds.
                let deadline = ContinuousClock.now + .seconds(5)
                var status = 0
                while status != 101, ContinuousClock.now < deadline {
                    let fresh = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                    status = (try? fresh.status()) ?? 0
                    if status != 101 { try await Task.sleep(for: .milliseconds(20)) }
                }
                #expect(status == 101)
            }
        }

        /// A frame longer than --max-message-bytes is answered with close code 1009 and the connection is closed.
        @Test func oversizedFrameIsClosedWith1009() async throws {
            try await withGateway(tokens: false) { gateway in
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                #expect(try raw.status() == 101)
                let length = UInt64(BrokerConfiguration().maxMessageBytes + 1)
                let header: [UInt8] =
                    [0x81, 0x80 | 127] + (0..<8).reversed().map { UInt8(truncatingIfNeeded: length >> ($0 * 8)) }
                try raw.sendRaw(header + [1, 2, 3, 4])
                let read = try #require(raw.readUntilClosed(timeout: 5_000))
                print("answer to a \(length)-byte frame: \(read.map { String($0, radix: 16) })")
                // A close frame: 0x88, a length of at least 2, then the code.
                #expect(read.count >= 4)
                #expect(read.first == 0x88)
                #expect(read.count >= 4 && UInt16(read[2]) << 8 | UInt16(read[3]) == 1009)
            }
        }
    }
}
