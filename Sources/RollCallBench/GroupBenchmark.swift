import Foundation
import RollCallClient
import RollCallCore
import RollCallTestSupport
import RollCallWire
import Synchronization
import ZeroMQ

/// Groups under churn: many groups over a pool of users, every user with a session, status changes at a fixed
/// rate; measures the time from a member's change to the group message that carries it, the broker's CPU, and its
/// memory per group and per membership.
public struct GroupBenchmark {
    public struct Parameters: Sendable {
        public var name: String
        public var groups: Int
        public var size: Int
        /// Users the members are drawn from; with `groups * size` much larger than this, groups overlap heavily.
        public var pool: Int
        /// Status changes a second.
        public var rate: Int
        public var seconds: Double
        public var seed: UInt64 = 42

        public init(name: String, groups: Int, size: Int, pool: Int, rate: Int, seconds: Double) {
            self.name = name
            self.groups = groups
            self.size = size
            self.pool = pool
            self.rate = rate
            self.seconds = seconds
        }
    }

    public struct Result: Codable, Sendable {
        public var scenario: String
        public var groups: Int
        public var size: Int
        public var pool: Int
        public var memberships: Int
        public var rateAsked: Int
        public var changesSent: Int
        public var seconds: Double
        public var groupMessages: Int
        public var changedEntries: Int
        public var latencyMs: [String: Double]
        public var brokerCPUPercent: Double
        public var rssBaseBytes: Int
        public var rssWithGroupsBytes: Int
        public var bytesPerGroup: Double
        public var bytesPerMembership: Double
        public var failures: Int
        public var histogram: String
    }

    public let parameters: Parameters
    public let executable: String

    public init(_ parameters: Parameters, executable: String) {
        self.parameters = parameters
        self.executable = executable
    }

    public func run(log: (String) -> Void) throws -> Result {
        let p = parameters
        let broker = try BrokerProcess(
            executable: executable,
            arguments: [
                "--max-message-bytes", "1048576", "--update-hwm", "1000000", "--max-sessions-per-user", "4",
                "--max-group-size", "\(max(p.size, 10))",
            ])
        defer { broker.stop() }
        var random = SplitMix64(seed: p.seed)
        let users = (0..<p.pool).map { "u\($0)" }

        log("\(p.name): \(p.pool) sessions")
        let pipeline = try RequestPipeline(endpoint: broker.command)
        pipeline.collected = []
        for user in users {
            try pipeline.send(Array(#"{"op":"hello","user":"\#(user)","ttl_ms":3600000}"#.utf8))
        }
        try pipeline.drain()
        let sessions = try pipeline.collected!.map { body -> String in
            guard let session = try Codec.decodeReply(body).result.get()["session"]?.string else {
                throw BenchError("hello failed: \(String(decoding: body, as: UTF8.self))")
            }
            return session
        }
        pipeline.collected = nil
        Thread.sleep(forTimeInterval: 0.5)
        let rssBase = broker.residentBytes()

        log("\(p.name): \(p.groups) groups of \(p.size)")
        var memberships = 0
        for index in 0..<p.groups {
            let members = sample(p.size, of: p.pool, using: &random)
            memberships += members.count
            let list = members.map { #""\#(users[$0])""# }.joined(separator: ",")
            try pipeline.send(Array(#"{"op":"group","group":"g\#(index)","members":[\#(list)]}"#.utf8))
        }
        try pipeline.drain()
        Thread.sleep(forTimeInterval: 0.5)
        let rssGroups = broker.residentBytes()

        let subscriber = try LatencySubscriber(endpoint: broker.update, topics: ["group/"])
        Thread.sleep(forTimeInterval: 0.3)

        log("\(p.name): \(p.rate) changes/s for \(p.seconds) s")
        let statuses: [Status] = [.away, .busy, .offline, .online]
        var current = [Int](repeating: 3, count: p.pool)
        let total = Int(Double(p.rate) * p.seconds)
        let cpuBefore = broker.cpuSeconds()
        let start = ContinuousClock.now
        for index in 0..<total {
            let due = start + .nanoseconds(Int64(Double(index) * 1e9 / Double(p.rate)))
            let wait = ContinuousClock.now.duration(to: due)
            if wait > .microseconds(200) { Thread.sleep(forTimeInterval: Double(wait.components.attoseconds) / 1e18) }
            let user = Int(random.next() % UInt64(p.pool))
            current[user] = (current[user] + 1) % statuses.count
            let body =
                #"{"op":"status","session":"\#(sessions[user])","status":"\#(statuses[current[user]])","text":"b\#(monotonicNanoseconds())"}"#
            try pipeline.send(Array(body.utf8))
        }
        try pipeline.drain()
        let elapsed = ContinuousClock.now - start
        let wall = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let cpu = broker.cpuSeconds() - cpuBefore
        Thread.sleep(forTimeInterval: 0.3)
        let measured = subscriber.stop()

        let latency = measured.latency
        return Result(
            scenario: p.name, groups: p.groups, size: p.size, pool: p.pool, memberships: memberships,
            rateAsked: p.rate, changesSent: total, seconds: wall, groupMessages: measured.messages,
            changedEntries: measured.entries,
            latencyMs: [
                "p50": latency.milliseconds(at: 50), "p90": latency.milliseconds(at: 90),
                "p99": latency.milliseconds(at: 99), "p99.9": latency.milliseconds(at: 99.9),
                "max": latency.maxMilliseconds,
            ],
            brokerCPUPercent: cpu / wall * 100, rssBaseBytes: rssBase, rssWithGroupsBytes: rssGroups,
            bytesPerGroup: Double(rssGroups - rssBase) / Double(max(1, p.groups)),
            bytesPerMembership: Double(rssGroups - rssBase) / Double(max(1, memberships)),
            failures: pipeline.failures, histogram: latency.distribution)
    }

    /// `count` distinct indices below `pool`.
    private func sample(_ count: Int, of pool: Int, using random: inout SplitMix64) -> [Int] {
        if count * 4 < pool {
            var chosen = Set<Int>()
            while chosen.count < count { chosen.insert(Int(random.next() % UInt64(pool))) }
            return Array(chosen)
        }
        var all = Array(0..<pool)
        all.shuffle(using: &random)
        return Array(all.prefix(count))
    }
}
