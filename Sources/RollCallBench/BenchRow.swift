import Foundation

/// One measured line of a benchmark run: what was measured, the figures, and a histogram where there is one.
public struct BenchRow: Codable, Sendable {
    public var id: String
    public var scenario: String
    /// The figures, by name (units in the name: `p50_ms`, `per_second`, `rss_bytes` ...).
    public var figures: [String: Double]
    /// One line for people.
    public var summary: String
    public var histogram: String?

    public init(id: String, scenario: String, figures: [String: Double], summary: String, histogram: String? = nil) {
        self.id = id
        self.scenario = scenario
        self.figures = figures
        self.summary = summary
        self.histogram = histogram
    }

    /// Rows as a Markdown table.
    public static func table(_ rows: [BenchRow]) -> String {
        (["| id | scenario | result |", "|---|---|---|"] + rows.map { "| \($0.id) | \($0.scenario) | \($0.summary) |" })
            .joined(separator: "\n")
    }
}

/// Formats a figure for a summary line.
func f(_ value: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", value) }

/// Formats a count with thousands separators.
func n(_ value: Double) -> String {
    let formatter = NumberFormatter()
    formatter.numberStyle = .decimal
    formatter.maximumFractionDigits = 0
    return formatter.string(from: NSNumber(value: value.rounded())) ?? "\(Int(value))"
}

extension LatencyHistogram {
    /// p50, p90, p99, p99.9 and max in milliseconds, for a row's figures.
    func figures(prefix: String = "") -> [String: Double] {
        [
            prefix + "p50_ms": milliseconds(at: 50), prefix + "p90_ms": milliseconds(at: 90),
            prefix + "p99_ms": milliseconds(at: 99), prefix + "p999_ms": milliseconds(at: 99.9),
            prefix + "max_ms": maxMilliseconds,
        ]
    }

    /// `p50/p99 a/b µs (p99.9 c, max d; n=N)`.
    var summary: String {
        "p50/p99 **\(f(milliseconds(at: 50) * 1_000, 0))/\(f(milliseconds(at: 99) * 1_000, 0)) µs** "
            + "(p90 \(f(milliseconds(at: 90) * 1_000, 0)), p99.9 \(f(milliseconds(at: 99.9) * 1_000, 0)), "
            + "max \(f(maxMilliseconds * 1_000, 0)); n=\(count))"
    }
}

/// Waits until the monotonic clock reaches `due`, sleeping: never spinning, which on two shared cores would take
/// a core from the broker being measured. A sleep may overshoot by tens of microseconds; the sends that fell due
/// meanwhile then go out back to back, so the rate holds.
func pace(until due: ContinuousClock.Instant) {
    let left = ContinuousClock.now.duration(to: due)
    guard left > .microseconds(20) else { return }
    Thread.sleep(forTimeInterval: left.seconds)
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Why a benchmark could not run or gave no figures.
public struct BenchError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
