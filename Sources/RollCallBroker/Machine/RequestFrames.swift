import RollCallCore

/// How a ROUTER message splits into the envelope its reply goes back on and the one body frame of a request:
/// `[routing id][...routing stack...][empty delimiter][body]` from REQ, `[routing id][body]` from DEALER.
struct RequestFrames: Equatable {
    /// The most frames a request message may have: routing id, a REQ delimiter or a short routing stack, a body.
    static let maxFrames = 8

    /// The index of the first body frame (the envelope is everything before it).
    var bodyStart: Int
    /// How many frames follow the envelope.
    var bodies: Int

    /// Finds the envelope of a message of `sizes` (each frame's byte count; the first is the routing id).
    init(sizes: some Collection<Int>) {
        var bodyStart = 1
        for (index, size) in sizes.enumerated().dropFirst() where size == 0 {
            bodyStart = index + 1
            break
        }
        self.bodyStart = bodyStart
        bodies = sizes.count - bodyStart
    }

    /// Why the message cannot be a request, answered without reading it (`nil`: its body is read): more frames than
    /// ``maxFrames`` (`truncated`), not exactly one body frame, or a body over `maxBytes`.
    func refusal(bodyBytes: Int?, truncated: Bool, maxBytes: Int) -> PresenceError? {
        if truncated || bodies != 1 {
            let detail =
                truncated ? "this message had more than \(Self.maxFrames) frames" : "this message had \(bodies)"
            return PresenceError(.badRequest, "a request is one body frame after the envelope; \(detail)")
        }
        if let bodyBytes, bodyBytes > maxBytes {
            return PresenceError(.tooLarge, "request of \(bodyBytes) bytes; at most \(maxBytes)")
        }
        return nil
    }
}
