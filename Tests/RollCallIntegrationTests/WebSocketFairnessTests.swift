import RollCallClient
import RollCallCore
import RollCallWire
import Testing

extension Integration {
    /// Expensive WebSocket reads wait their turn in the loop's one fair queue (docs/reliability.md), as the command
    /// endpoint's do: a connection's replies still come in the order of its requests, and its writes queued behind
    /// a read still count when it closes.
    @Suite("WebSocket reads take turns")
    struct WebSocketFairnessTests {
        /// Group reads followed by cheap requests on one WebSocket are answered in the order they were sent,
        /// although the reads wait in the fair queue and the cheap ones would be answered at once on their own.
        @Test func repliesKeepTheirOrderBehindQueuedReads() async throws {
            try await withGateway { gateway in
                let client = try gateway.broker.client()
                let members = (0..<100).map { UserID(validating: "member\($0)")! }
                _ = try client.group(GroupID(validating: "big")!, GroupEdit(members: members))
                let ws = try await gateway.client(token: try await gateway.token("ops", role: "operator"))
                var expected: [String] = []
                for index in 0..<20 {
                    try await ws.send(#"{"op":"group","group":"big","id":"read\#(index)"}"#)
                    try await ws.send(#"{"op":"ping","id":"ping\#(index)"}"#)
                    expected += ["read\(index)", "ping\(index)"]
                }
                var seen: [String] = []
                while seen.count < expected.count {
                    let text = try #require(try await ws.next(timeout: 10_000), "replies stopped after \(seen)")
                    guard case .object(let fields) = try JSONParser.parse(text), let id = fields["id"]?.string
                    else { continue }  // an update, not a reply
                    #expect(fields["ok"] == .bool(true), "\(text.prefix(200))")
                    seen.append(id)
                }
                #expect(seen == expected)
            }
        }

        /// A `status` queued behind a large read on a WebSocket that then closes still takes effect, as a queued
        /// edit does on the command endpoint: the broker reads a connection's requests before its close.
        @Test func queuedWriteCountsAtClose() async throws {
            // A grace period keeps the session after the close, so that its status shows what was applied.
            try await withGateway(tokens: true, { $0.presence.offlineGraceMilliseconds = 60_000 }) { gateway in
                let client = try gateway.broker.client()
                let members = (0..<100).map { UserID(validating: "member\($0)")! }
                _ = try client.group(GroupID(validating: "big")!, GroupEdit(members: members))
                let ws = try await gateway.client(token: try await gateway.token("alice"))
                let hello = try await ws.call(#"{"op":"hello","id":"h","user":"alice","ttl_ms":60000}"#, id: "h")
                let session = try #require(hello["session"]?.string)
                for index in 0..<10 { try await ws.send(#"{"op":"group","group":"big","id":"r\#(index)"}"#) }
                try await ws.send(#"{"op":"status","id":"s","session":"\#(session)","status":"busy","text":"late"}"#)
                ws.close()
                let deadline = ContinuousClock.now + .seconds(10)
                var record = try client.query(["alice".id])["alice".id]
                while record?.status != .busy, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(5))
                    record = try client.query(["alice".id])["alice".id]
                }
                #expect(record?.status == .busy && record?.text == "late")
            }
        }
    }
}
