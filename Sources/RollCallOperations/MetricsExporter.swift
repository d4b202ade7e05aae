import Foundation
import Metrics
import Prometheus

/// The Prometheus backend for swift-metrics, and the process metrics read from `/proc` at each scrape. Made once by
/// the executable, which bootstraps the metrics system with it; the broker library only uses the metrics API.
public final class MetricsExporter: Sendable {
    private let registry: PrometheusCollectorRegistry
    private let residentMemory: Prometheus.Gauge
    private let cpuSeconds: Prometheus.Gauge
    private let openDescriptors: Prometheus.Gauge
    private let startTime: Prometheus.Gauge

    /// A registry with buckets fit for what RollCall times: a loop round takes microseconds, a store write
    /// milliseconds.
    public init() {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        func gauge(_ name: String, _ unit: String, _ help: String) -> Prometheus.Gauge {
            registry.makeGauge(
                descriptor: MetricNameDescriptor(namespace: "process", metricName: name, unitName: unit, helpText: help)
            )
        }
        residentMemory = gauge("resident_memory", "bytes", "Resident memory size in bytes.")
        cpuSeconds = gauge("cpu_seconds", "total", "User and system CPU time in seconds.")
        openDescriptors = gauge("open", "fds", "Number of open file descriptors.")
        startTime = gauge("start_time", "seconds", "Start time of the process since the Unix epoch in seconds.")
        startTime.set(ProcessReadings.startTime())
    }

    /// The swift-metrics factory over this registry.
    public var factory: PrometheusMetricsFactory {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets["rollcall_loop_iteration_seconds"] = [
            .microseconds(10), .microseconds(50), .microseconds(100), .microseconds(500), .milliseconds(1),
            .milliseconds(5), .milliseconds(10), .milliseconds(50), .milliseconds(100), .milliseconds(500),
            .seconds(1),
        ]
        factory.durationHistogramBuckets["rollcall_store_write_seconds"] = [
            .microseconds(100), .microseconds(500), .milliseconds(1), .milliseconds(5), .milliseconds(10),
            .milliseconds(50), .milliseconds(100), .milliseconds(500), .seconds(1), .seconds(5),
        ]
        return factory
    }

    /// Makes this the process's metrics backend. Call it once, before the broker starts.
    public func bootstrap() { MetricsSystem.bootstrap(factory) }

    /// Everything in Prometheus's text format (version 0.0.4), with the process metrics read now.
    public func scrape() -> [UInt8] {
        residentMemory.set(Double(ProcessReadings.residentBytes()))
        cpuSeconds.set(ProcessReadings.cpuSeconds())
        openDescriptors.set(Double(ProcessReadings.openDescriptors()))
        return registry.emitToBuffer()
    }
}

/// This process's readings from `/proc/self`.
enum ProcessReadings {
    static func residentBytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return 0 }
        return (Int(line.split(separator: " ")[1]) ?? 0) * 1_024
    }

    /// Fields 14 and 15 of `/proc/self/stat` (utime, stime) in seconds.
    static func cpuSeconds() -> Double {
        let fields = statFields()
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    static func openDescriptors() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
    }

    /// Boot time plus field 22 (start time in clock ticks since boot).
    static func startTime() -> Double {
        let fields = statFields()
        guard fields.count > 19, let ticks = Double(fields[19]),
            let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
            let boot = Double(line.split(separator: " ")[1])
        else { return Date().timeIntervalSince1970 }
        return boot + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The fields after the command name in `/proc/self/stat` (the state is the first).
    private static func statFields() -> [Substring] {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return [] }
        return stat[stat.index(after: close)...].split(separator: " ")
    }
}
