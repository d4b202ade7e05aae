import Foundation
import RollCallBroker
import RollCallCore
import RollCallTestSupport
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

        /// A validly signed token whose `exp` is centuries away (past what a 64-bit count of nanoseconds holds) is
        /// refused with 401: its lifetime exceeds `--jwt-max-lifetime-s` (docs/websocket.md, Tokens). Nothing traps,
        /// and a token within the limit, the longest allowed, is taken as before.
        @Test func farFutureExpiryIsRefused() async throws {
            try await withGateway { gateway in
                let token = try await gateway.token("kim", expiresIn: 1e12)
                #expect(try RawWebSocket(port: gateway.port, path: "/v1/ws?token=\(token)").status() == 401)
                let longest = try await gateway.token("kim", expiresIn: 86_000)
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws?token=\(longest)")
                #expect(try raw.status() == 101)
                try raw.send(#"{"op":"ping","id":7}"#)
                var buffer = [UInt8](repeating: 0, count: 4_096)
                let count = recv(raw.descriptor, &buffer, buffer.count, 0)
                let reply = count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : ""
                print("a token expiring in 86,000 s: the ping's reply \(reply.prefix(80))")
                #expect(reply.contains(#""id":7"#))
            }
        }

        /// A peer that sends pings and never reads makes the connection hold one pong at a time, not one per ping:
        /// 100,000 pings (13 MB) grow the broker's memory by little (before: about 400 bytes a ping, for ever).
        @Test func pingsFromAPeerThatNeverReadsHoldOnePong() async throws {
            try await withGateway(tokens: false) { gateway in
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws", receiveBuffer: 4_096)
                #expect(try raw.status() == 101)
                let mask: [UInt8] = [1, 2, 3, 4]
                let ping = [0x89, 0x80 | 125] + mask + [UInt8](repeating: 0x78, count: 125)
                let chunk = Array([[UInt8]](repeating: ping, count: 1_000).joined())
                let before = ProcessStats.residentBytes(pid: getpid())
                for _ in 0..<100 { try raw.sendRaw(chunk) }
                // The server has read them all once no byte waits in either side's TCP queues (reading its answer
                // would take the pongs it holds, which is what is measured).
                try raw.send(#"{"op":"ping","id":9}"#)
                try await waitFor(seconds: 10) { tcpQueuesEmpty(port: gateway.port) }
                let grown = ProcessStats.residentBytes(pid: getpid()) - before
                print(
                    "100,000 pings from a peer that never reads: the test process (broker included) grew \(grown / 1_024) KiB"
                )
                #expect(grown < 8 * 1_024 * 1_024)
            }
        }
    }
}
