import Foundation
import Logging
import RollCallWire

/// Logs as JSON lines on standard error, for log shippers: one object per line with `time` (ISO 8601, UTC,
/// milliseconds), `level`, `label`, `message`, and the metadata as string fields (a metadata key never overwrites
/// those four). A line that cannot be written is lost, never fatal.
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    private let label: String

    public init(label: String) { self.label = label }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("time")
        writer.string(Self.timestamp())
        writer.key("level")
        writer.string(event.level.rawValue)
        writer.key("label")
        writer.string(label)
        writer.key("message")
        writer.string(event.message.description)
        var all = metadata
        if let extra = event.metadata { all.merge(extra) { $1 } }
        for (key, value) in all.sorted(by: { $0.key < $1.key })
        where !["time", "level", "label", "message"].contains(key) {
            writer.key(key)
            writer.string("\(value)")
        }
        writer.endObject()
        var line = writer.bytes
        line.append(UInt8(ascii: "\n"))
        // One write(2) per line, so that lines from several threads never interleave.
        line.withUnsafeBytes { raw in _ = write(STDERR_FILENO, raw.baseAddress, raw.count) }
    }

    private static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
            parts.tm_hour, parts.tm_min, parts.tm_sec, now.tv_nsec / 1_000_000)
    }
}
