import Foundation
import RollCallCore
import RollCallStore
import RollCallTestSupport
import RollCallWire

/// The presence log's costs (docs/history.md): the hot path with the log on and off, alternating; `history` reads
/// against 90 days of a busy user; disk per transition.
extension PresenceBenchmarks {
    /// A fresh data directory, removed by the caller.
    static func temporaryDirectory() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-bench-\(UUID().uuidString)").path
    }

    /// Latency at `rate` and lossless throughput to one subscriber, each on a broker with a data directory, with the
    /// log (`--history-retention-ms` default) and without (`0`), in `rounds` alternating rounds; the medians.
    public func logOnAndOff(rate: Int, seconds: Double, rounds: Int) throws -> [BenchRow] {
        var runs: [String: [BenchRow]] = [:]
        for round in 0..<rounds {
            for logged in round.isMultiple(of: 2) ? [false, true] : [true, false] {
                let directory = Self.temporaryDirectory()
                defer { try? FileManager.default.removeItem(atPath: directory) }
                var bench = self
                bench.brokerArguments += ["--data-dir", directory] + (logged ? [] : ["--history-retention-ms", "0"])
                let suffix = logged ? "log" : "nolog"
                runs["latency-\(suffix)", default: []].append(try bench.latency(rate: rate, seconds: seconds))
                runs["throughput-\(suffix)", default: []].append(try bench.throughput(subscribers: 1, seconds: seconds))
            }
        }
        var rows: [BenchRow] = []
        for (name, figure) in [("latency", "p50_ms"), ("latency", "p99_ms"), ("throughput", "per_second")] {
            let off = Self.median(runs["\(name)-nolog"]!.compactMap { $0.figures[figure] })
            let on = Self.median(runs["\(name)-log"]!.compactMap { $0.figures[figure] })
            let id = "H1.\(name)-\(figure)"
            rows.append(
                BenchRow(
                    id: id,
                    scenario:
                        "\(name == "latency" ? "latency at \(rate)/s" : "lossless throughput, 1 subscriber"), "
                        + "data directory, presence log on and off, median of \(rounds) alternating rounds",
                    figures: ["off": off, "on": on, "ratio": off > 0 ? on / off : 0],
                    summary: "\(figure): off \(f(off, 3)), on \(f(on, 3)), on/off **\(f(off > 0 ? on / off : 0))x**"))
        }
        return rows
    }

    /// `history` pages of a user with `perDay` transitions a day for `days` days (beside `others` users with a
    /// transition a day each), read through the broker: p50/p99 of a page of 100 at a random point, and the file's
    /// bytes per transition.
    public func historyReads(days: Int, perDay: Int, others: Int, reads: Int) throws -> [BenchRow] {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let day: Int64 = 86_400_000
        let now = Int64(Date().timeIntervalSince1970 * 1_000)
        let start = now - Int64(days) * day
        let store = try SQLiteStore(directory: directory)
        _ = try store.openLog(keep: true)
        var offset: UInt64 = 0
        var batch: [LogEntry] = []
        var busy: [UInt64] = []
        func add(_ user: String, _ time: Int64, _ status: Status) throws {
            offset += 1
            let record = PresenceRecord(
                user: UserID(validating: user)!, status: status, text: status == .busy ? "in a call" : nil,
                since: BrokerTime(milliseconds: time), lastSeen: BrokerTime(milliseconds: time),
                sessions: status == .offline ? 0 : 1, seq: UInt64(time) * 1_000,
                reason: status == .offline ? .bye : nil,
                offset: offset)
            batch.append(LogEntry(offset: offset, time: BrokerTime(milliseconds: time), record: record))
            if user == "busy" { busy.append(offset) }
            if batch.count == 10_000 {
                try store.write(StoreBatch(brokerTime: BrokerTime(milliseconds: time), log: batch))
                batch.removeAll(keepingCapacity: true)
            }
        }
        let statuses: [Status] = [.online, .busy, .away, .offline]
        for dayIndex in 0..<days {
            for index in 0..<perDay {
                let time = start + Int64(dayIndex) * day + Int64(index) * (day / Int64(perDay))
                try add("busy", time, statuses[index % statuses.count])
            }
            for other in 0..<(others / days) {
                try add("u\(dayIndex)x\(other)", start + Int64(dayIndex) * day + Int64(other), .online)
            }
        }
        try store.write(StoreBatch(brokerTime: BrokerTime(milliseconds: now), log: batch))
        let entries = Double(offset)
        let bytes = Self.directoryBytes(directory)
        log("history: \(n(entries)) transitions written, \(n(bytes / entries)) bytes each on disk")

        var bench = self
        bench.brokerArguments += ["--data-dir", directory, "--history-retention-ms", "\(Int64(days + 1) * day)"]
        let broker = try bench.broker([])
        defer { broker.stop() }
        let pipeline = try RequestPipeline(endpoint: broker.command, credentials: curve?.credentials)
        var histogram = LatencyHistogram()
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<reads {
            let after = busy[Int.random(in: 0..<(busy.count - 100), using: &generator)]
            let started = monotonicNanoseconds()
            let reply = try pipeline.call(
                .history(HistoryQuery(user: UserID(validating: "busy")!, after: after, limit: 100)))
            histogram.record(microseconds: (monotonicNanoseconds() - started) / 1_000)
            guard case .array(let items)? = reply[JSONKey("history")], items.count == 100 else {
                throw BenchError("a history page did not hold 100 transitions: \(reply)")
            }
        }
        var figures = histogram.figures()
        figures["transitions"] = entries
        figures["bytes_per_transition"] = bytes / entries
        return [
            BenchRow(
                id: "H2.history-\(days)d",
                scenario:
                    "`history` page of 100 at a random point, a user with \(n(Double(perDay)))/day for \(days) days "
                    + "among \(n(entries)) transitions, over ZeroMQ",
                figures: figures,
                summary:
                    "p50 \(f(figures["p50_ms"] ?? 0, 3)) ms, p99 \(f(figures["p99_ms"] ?? 0, 3)) ms; disk "
                    + "\(n(bytes / entries)) bytes per transition")
        ]
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        return sorted.count.isMultiple(of: 2)
            ? (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2 : sorted[sorted.count / 2]
    }

    static func directoryBytes(_ directory: String) -> Double {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.reduce(0.0) { total, name in
            let attributes = try? FileManager.default.attributesOfItem(atPath: directory + "/" + name)
            return total + Double((attributes?[.size] as? NSNumber)?.intValue ?? 0)
        }
    }
}
