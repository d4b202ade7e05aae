import Foundation
import RollCallTestSupport
import ZeroMQ

/// One user's changes timed to many receivers: the time to each delivery, to the last receiver, and the deliveries
/// that never came (5 s at most for each change).
struct FanOut {
    var perDelivery = LatencyHistogram()
    var toAll = LatencyHistogram()
    var missed = 0

    /// The three figures, as the scenarios take them.
    var results: (perDelivery: LatencyHistogram, toAll: LatencyHistogram, missed: Int) { (perDelivery, toAll, missed) }

    /// `changes` stamped changes of `session`, one at a time, each awaited on all `receivers`: `arrivals(pending,
    /// stamp)` waits up to 100 ms and returns those of `pending` that received the change stamped `stamp`, each with
    /// when it was read (`monotonicNanoseconds`).
    static func time(
        receivers: Int, pipeline: RequestPipeline, session: String, changes: Int,
        arrivals: (Set<Int>, UInt64) throws -> [(index: Int, at: UInt64)]
    ) throws -> FanOut {
        var measured = FanOut()
        for _ in 0..<changes {
            let stamp = monotonicNanoseconds()
            try pipeline.send(PresenceBenchmarks.timedChange(session, stamp: stamp))
            var pending = Set(0..<receivers)
            var last = stamp
            let limit = ContinuousClock.now + .seconds(5)
            while !pending.isEmpty, ContinuousClock.now < limit {
                for arrival in try arrivals(pending, stamp) where pending.remove(arrival.index) != nil {
                    measured.perDelivery.record(microseconds: (arrival.at - stamp) / 1_000)
                    last = max(last, arrival.at)
                }
            }
            measured.missed += pending.count
            measured.toAll.record(microseconds: (last - stamp) / 1_000)
            try pipeline.drain()
            Thread.sleep(forTimeInterval: 0.05)
        }
        return measured
    }

    /// The same over SUB sockets of the update endpoint: only each change's own record counts.
    static func time(
        _ sockets: [Socket], pipeline: RequestPipeline, session: String, changes: Int
    ) throws -> FanOut {
        var poller = Poller(sockets)
        return try time(receivers: sockets.count, pipeline: pipeline, session: session, changes: changes) {
            pending, stamp in
            let ready = try poller.poll(timeout: 100)
            var arrived: [(index: Int, at: UInt64)] = []
            for index in pending where ready[index] {
                while let (frames, _) = try sockets[index].receiveMessage() {
                    let now = monotonicNanoseconds()
                    if frames.count == 2, LatencySubscriber.sendTimes(in: frames[1].bytes).contains(stamp) {
                        arrived.append((index, now))
                    }
                }
            }
            return arrived
        }
    }

    /// Waits until every socket has received its subscription's last value (20 s at most), then until all is quiet
    /// (each subscription sent the last value to the earlier subscribers too), dropping what came.
    static func awaitLastValues(_ sockets: [Socket]) throws {
        var poller = Poller(sockets)
        var waiting = Set(sockets.indices)
        let deadline = ContinuousClock.now + .seconds(20)
        while !waiting.isEmpty, ContinuousClock.now < deadline {
            let ready = try poller.poll(timeout: 100)
            for index in waiting where ready[index] {
                while try sockets[index].receiveMessage() != nil {}
                waiting.remove(index)
            }
        }
        guard waiting.isEmpty else { throw BenchError("\(waiting.count) subscribers never got the last value") }
        while try poller.poll(timeout: 200).contains(true) {
            for socket in sockets { while try socket.receiveMessage() != nil {} }
        }
    }
}
