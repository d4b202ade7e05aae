import Logging
import ZeroMQ

/// What wakes the event loop and what it tells: the sockets it polls (each endpoint uses its own; the loop polls and
/// closes them all), among them the one other threads wake it with, the mailbox of jobs they post (LoopMailbox.swift),
/// and the heartbeat the loop beats every round, which health checks read (LoopHeartbeat.swift).
struct LoopSignals {
    let sockets: LoopSockets
    let mailbox: LoopMailbox
    let beat: LoopHeartbeat
}

/// What the loop tells operators: its log, its metrics, and when the gauges are next brought up to date (on the loop
/// heartbeat's monotonic clock).
struct LoopTelemetry {
    let logger: Logger
    let metrics: BrokerMetrics
    var nextGaugeUpdate: Int64 = 0

    /// Records a round's duration, and brings the gauges up to date once a second (`update`).
    mutating func roundEnded(started: ContinuousClock.Instant, monotonic: Int64, update: (BrokerMetrics) -> Void) {
        if monotonic >= nextGaugeUpdate {
            update(metrics)
            nextGaugeUpdate = monotonic + 1_000
        }
        metrics.loopIteration.record(duration: ContinuousClock.now - started)
    }
}

/// The machine's effects being carried out (EventLoop+Effects.swift), swapped with the machine's buffer so that both
/// keep their capacity.
struct EffectRun {
    var carrying: [BrokerMachine.Effect] = []
    var isCarrying = false
}
