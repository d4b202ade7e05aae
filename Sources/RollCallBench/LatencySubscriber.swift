import Foundation
import RollCallClient
import Synchronization
import ZeroMQ

/// Follows topics on its own thread and times every record it receives by the send time its text carries
/// (`"text":"b<CLOCK_MONOTONIC ns>"`), with a byte scan so that measuring costs far less than the broker measured.
public final class LatencySubscriber: Sendable {
    public struct Measured: Sendable {
        public var latency = LatencyHistogram()
        public var messages = 0
        public var entries = 0
        /// When the last record arrived (CLOCK_MONOTONIC ns), to time delivery rather than sending.
        public var lastArrival: UInt64 = 0
    }

    private let stopping = Atomic<Bool>(false)
    private let result = Mutex(Measured())
    private let done = DispatchSemaphore(value: 0)

    public init(endpoint: String, topics: [String], credentials: CurveCredentials? = nil) throws {
        let context = try Context()
        let socket = try Socket(context, .sub)
        try credentials?.apply(to: socket)
        try socket.set(.receiveHighWaterMark(1_000_000))
        try socket.set(.linger(milliseconds: 0))
        for topic in topics { try socket.set(.subscribe(Array(topic.utf8))) }
        try socket.connect(endpoint)
        let handOff = HandOff((context, socket))
        Thread { [self] in
            let (context, socket) = handOff.take()
            withExtendedLifetime(context) { self.run(socket) }
        }.start()
    }

    /// What arrived so far (the thread keeps running).
    public var messagesSoFar: Int { count.load(ordering: .relaxed) }
    private let count = Atomic<Int>(0)

    private func run(_ socket: Socket) {
        defer { done.signal() }
        var measured = Measured()
        var poller = Poller([socket])
        while !stopping.load(ordering: .relaxed) {
            guard (try? poller.poll(timeout: 50))?.first == true else { continue }
            while let (frames, _) = try? socket.receiveMessage(), frames.count == 2 {
                let now = monotonicNanoseconds()
                measured.messages += 1
                measured.lastArrival = now
                count.add(1, ordering: .relaxed)
                // A byte scan, not a parse: the measuring side must cost far less than the broker it measures.
                for sent in Self.sendTimes(in: frames[1].bytes) {
                    measured.entries += 1
                    measured.latency.record(microseconds: now > sent ? (now - sent) / 1_000 : 0)
                }
            }
        }
        result.withLock { $0 = measured }
    }

    private static let marker = Array(#""text":"b"#.utf8)

    /// The send times carried as `"text":"b<nanoseconds>"` in a group message's changed records.
    public static func sendTimes(in body: [UInt8]) -> [UInt64] {
        var times: [UInt64] = []
        var index = 0
        let last = body.count - marker.count
        while index <= last {
            if body[index] == marker[0] && body[index..<index + marker.count].elementsEqual(marker) {
                index += marker.count
                var value: UInt64 = 0
                while index < body.count, body[index] >= 0x30, body[index] <= 0x39 {
                    value = value &* 10 &+ UInt64(body[index] - 0x30)
                    index += 1
                }
                times.append(value)
            } else {
                index += 1
            }
        }
        return times
    }

    public func stop() -> Measured {
        stopping.store(true, ordering: .relaxed)
        done.wait()
        return result.withLock { $0 }
    }
}
