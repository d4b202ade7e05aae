import RollCallCore
import Testing

@testable import RollCallBroker

/// How a ROUTER message splits into envelope and body, and which messages are refused before their body is read.
@Suite("Request frames")
struct RequestFramesTests {
    /// DEALER: routing id, body.
    @Test func dealerMessage() {
        let split = RequestFrames(sizes: [5, 40])
        #expect(split == RequestFrames(sizes: [5, 40]))
        #expect(split.bodyStart == 1)
        #expect(split.bodies == 1)
        #expect(split.refusal(bodyBytes: 40, truncated: false, maxBytes: 100) == nil)
    }

    /// REQ, through a proxy: routing id, the proxy's stack, the empty delimiter, body; the envelope keeps it all.
    @Test func reqMessageThroughAProxy() {
        let split = RequestFrames(sizes: [5, 5, 0, 40])
        #expect(split.bodyStart == 3)
        #expect(split.bodies == 1)
    }

    /// No body, or two bodies, is `bad_request` saying how many there were.
    @Test func notOneBodyIsABadRequest() {
        let none = RequestFrames(sizes: [5]).refusal(bodyBytes: nil, truncated: false, maxBytes: 100)
        #expect(none?.code == .badRequest)
        #expect(none?.message.contains("had 0") == true)
        let two = RequestFrames(sizes: [5, 0, 10, 10]).refusal(bodyBytes: nil, truncated: false, maxBytes: 100)
        #expect(two?.code == .badRequest)
        #expect(two?.message.contains("had 2") == true)
    }

    /// More frames than the socket read is `bad_request`, whatever the frames read look like.
    @Test func truncatedIsABadRequest() {
        let refusal = RequestFrames(sizes: [5, 40]).refusal(bodyBytes: 40, truncated: true, maxBytes: 100)
        #expect(refusal?.code == .badRequest)
        #expect(refusal?.message.contains("more than \(RequestFrames.maxFrames) frames") == true)
    }

    /// A body over the limit is `too_large`, saying both sizes; one at the limit is read.
    @Test func bodyOverTheLimitIsTooLarge() {
        let split = RequestFrames(sizes: [5, 101])
        let refusal = split.refusal(bodyBytes: 101, truncated: false, maxBytes: 100)
        #expect(refusal?.code == .tooLarge)
        #expect(refusal?.message == "request of 101 bytes; at most 100")
        #expect(split.refusal(bodyBytes: 100, truncated: false, maxBytes: 100) == nil)
    }
}
