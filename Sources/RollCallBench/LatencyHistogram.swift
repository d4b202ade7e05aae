import Histogram

/// Latencies in microseconds, recorded into an HDR histogram (3 significant digits, up to 60 s).
public struct LatencyHistogram: Sendable {
    public private(set) var histogram = Histogram<UInt64>(
        highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)

    public init() {}

    public mutating func record(microseconds: UInt64) {
        _ = histogram.record(min(microseconds, histogram.highestTrackableValue))
    }

    public mutating func add(_ other: LatencyHistogram) { histogram.add(other.histogram) }

    public var count: UInt64 { histogram.totalCount }

    /// The value at `percentile` (0 to 100), in milliseconds.
    public func milliseconds(at percentile: Double) -> Double {
        count == 0 ? 0 : Double(histogram.valueAtPercentile(percentile)) / 1_000
    }

    public var maxMilliseconds: Double { count == 0 ? 0 : Double(histogram.max) / 1_000 }

    /// The percentile distribution, in milliseconds, as HdrHistogram prints it.
    public var distribution: String {
        var text = ""
        histogram.outputPercentileDistribution(
            to: &text, outputValueUnitScalingRatio: 1_000, percentileTicksPerHalfDistance: 2)
        return text
    }
}
