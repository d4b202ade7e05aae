/// Writes JSON straight into bytes, for the fixed shapes of replies and records; no intermediate tree.
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []
    private var needsComma = false

    public init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    public mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    public mutating func beginArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        needsComma = false
    }

    public mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    /// Writes an object key; the value written next belongs to it.
    public mutating func key(_ name: StaticString) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
        needsComma = false
    }

    /// Writes an object key that is data, escaped as needed.
    public mutating func key(_ name: String) {
        string(name)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    public mutating func string(_ value: String) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [
                    UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                    hex[Int(byte >> 4)], hex[Int(byte & 0xF)],
                ])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
        needsComma = true
    }

    public mutating func integer<T: BinaryInteger>(_ value: T) {
        separate()
        if let value = Int64(exactly: value) {
            // Every seq, time and count fits: its digits go straight into the buffer, with no String made for them
            // (a record has three such numbers, and `String(_:)` was 1 % of the broker's time under load).
            if value < 0 { bytes.append(UInt8(ascii: "-")) }
            var rest = value.magnitude
            let start = bytes.count
            repeat {
                bytes.append(UInt8(ascii: "0") + UInt8(rest % 10))
                rest /= 10
            } while rest > 0
            bytes[start...].reverse()
        } else {
            bytes.append(contentsOf: String(value).utf8)
        }
        needsComma = true
    }

    public mutating func bool(_ value: Bool) {
        separate()
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
        needsComma = true
    }

    public mutating func null() {
        separate()
        bytes.append(contentsOf: "null".utf8)
        needsComma = true
    }

    /// Writes a value that is already encoded JSON.
    public mutating func raw(_ json: [UInt8]) {
        separate()
        bytes.append(contentsOf: json)
        needsComma = true
    }

    /// Writes any parsed value back out, numbers exactly as they were written.
    public mutating func value(_ json: JSON) {
        switch json {
        case .null: null()
        case .bool(let value): bool(value)
        case .number(let literal):
            separate()
            bytes.append(contentsOf: literal.utf8)
            needsComma = true
        case .string(let value): string(value)
        case .array(let elements):
            beginArray()
            for element in elements { value(element) }
            endArray()
        case .object(let members):
            beginObject()
            for (name, member) in members.sorted(by: { $0.key.text < $1.key.text }) {
                key(name.text)
                value(member)
            }
            endObject()
        }
    }

    /// A point in the output to go back to with ``rewind(to:)``.
    public struct Mark {
        fileprivate let count: Int
        fileprivate let needsComma: Bool
    }

    /// The current point in the output.
    public var mark: Mark { Mark(count: bytes.count, needsComma: needsComma) }

    /// Drops everything written after `mark`.
    public mutating func rewind(to mark: Mark) {
        bytes.removeSubrange(mark.count...)
        needsComma = mark.needsComma
    }

    private mutating func separate() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }
}
