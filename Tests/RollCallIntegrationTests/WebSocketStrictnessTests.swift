import Foundation
import RollCallBroker
import RollCallClient
import RollCallCore
import RollCallWire
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension Integration {
    /// RFC 6455's "fail the connection" over a real socket, and pings on the test-mode clock.
    @Suite struct WebSocketStrictnessTests {
        /// The close code of the close frame a raw peer read before the server closed, if that is what it read.
        static func closeCode(_ read: [UInt8]?) -> UInt16? {
            guard let read, read.count >= 4, read[0] == 0x88 else { return nil }
            return UInt16(read[2]) << 8 | UInt16(read[3])
        }

        /// An unmasked text frame is answered with close 1002, not with a reply, and the connection is closed.
        @Test func unmaskedFrameIsClosedWith1002() async throws {
            try await withGateway(tokens: false) { gateway in
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                #expect(try raw.status() == 101)
                let payload = Array(#"{"op":"ping","id":1}"#.utf8)
                try raw.sendRaw([0x81, UInt8(payload.count)] + payload)
                #expect(Self.closeCode(raw.readUntilClosed(timeout: 5_000)) == 1002)
            }
        }

        /// A frame with RSV1 set (no extension was negotiated) is answered with close 1002.
        @Test func reservedBitIsClosedWith1002() async throws {
            try await withGateway(tokens: false) { gateway in
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                #expect(try raw.status() == 101)
                try raw.sendRaw([0xC1, 0x80 | 2, 0, 0, 0, 0] + Array("{}".utf8))
                #expect(Self.closeCode(raw.readUntilClosed(timeout: 5_000)) == 1002)
            }
        }

        /// A text frame that is not UTF-8 is answered with close 1007, not a `bad_request` reply.
        @Test func invalidUTF8IsClosedWith1007() async throws {
            try await withGateway(tokens: false) { gateway in
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                #expect(try raw.status() == 101)
                try raw.sendRaw([0x81, 0x80 | 3, 0, 0, 0, 0, 0x7B, 0xFF, 0x7D])
                #expect(Self.closeCode(raw.readUntilClosed(timeout: 5_000)) == 1007)
            }
        }

        /// A close with code 1005 (which no endpoint may send) is answered with 1002 rather than echoed.
        @Test func invalidCloseCodeIsAnsweredWith1002() async throws {
            try await withGateway(tokens: false) { gateway in
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                #expect(try raw.status() == 101)
                try raw.sendRaw([0x88, 0x80 | 2, 0, 0, 0, 0, 0x03, 0xED])
                #expect(Self.closeCode(raw.readUntilClosed(timeout: 5_000)) == 1002)
            }
        }

        /// In test mode a phone that answers no ping is offline after two `advance`s of the ping interval, though
        /// the real ping interval (a minute here) never passes: the test takes milliseconds.
        @Test func silentPhoneIsOfflineOnTheTestClock() async throws {
            let configure: (inout BrokerConfiguration) -> Void = {
                $0.testMode = true
                $0.storage = .none
                $0.webSocket.pingMilliseconds = 60_000
            }
            try await withGateway(tokens: false, configure) { gateway in
                let watch = try gateway.broker.subscriber("phone")
                let raw = try RawWebSocket(port: gateway.port, path: "/v1/ws")
                #expect(try raw.status() == 101)
                try raw.send(#"{"op":"hello","user":"phone","keepalive":"connection","ttl_ms":1000}"#)
                try watch.expect("phone") { $0.status == .online }
                let control = try gateway.broker.client()
                let started = ContinuousClock.now
                _ = try control.call(.advance(milliseconds: 60_000))  // the first round: a ping
                #expect(try control.query(["phone".id])["phone".id]?.status == .online)
                _ = try control.call(.advance(milliseconds: 60_000))  // the second: nothing came, the cut
                let record = try watch.expect("phone", timeout: 5_000) { $0.status == .offline }
                let took = milliseconds(since: started)
                print("a silent phone offline \(took) ms (real time) after two advances of a 60 s ping")
                #expect(record.reason == .closed)
                #expect(took < 5_000)
            }
        }
    }
}
