/// A parsed JSON value. Numbers keep their literal text, so an `id` is echoed exactly as the client wrote it.
public enum JSON: Equatable, Sendable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSON])
    case object([JSONKey: JSON])

    /// The value as a 64-bit integer, if it is a number literal without fraction or exponent that fits.
    public var integer: Int64? {
        guard case .number(let literal) = self else { return nil }
        return Int64(literal)
    }

    public var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var isScalar: Bool {
        switch self {
        case .array, .object: false
        default: true
        }
    }

    /// A word for the value's type, for error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

/// Why a body is not acceptable JSON.
public struct JSONError: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String
    public var offset: Int
    public var description: String { "\(message) at byte \(offset)" }
}

/// An object key. Keys are compared by their UTF-8 bytes, as JSON (RFC 8259 §8.3) and the protocol compare them:
/// Swift's `String ==` would take `"é"` and `"e\u{301}"` (one letter in two Unicode forms) for the same key.
public struct JSONKey: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let text: String

    public init(_ text: String) { self.text = text }
    public init(stringLiteral text: String) { self.text = text }

    public static func == (lhs: JSONKey, rhs: JSONKey) -> Bool { sameUTF8(lhs.text, rhs.text) }
    public func hash(into hasher: inout Hasher) {
        var text = text
        text.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }  // contiguous: no copy for native text
    }
    public var description: String { text }
}

/// Whether two strings are the same UTF-8 bytes, compared as contiguous buffers (the hot path of every request's
/// key look-ups).
func sameUTF8(_ a: String, _ b: String) -> Bool {
    var a = a
    var b = b
    return a.withUTF8 { x in b.withUTF8 { y in x.count == y.count && x.elementsEqual(y) } }
}
