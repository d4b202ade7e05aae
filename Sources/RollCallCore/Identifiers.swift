/// A user id: 1 to 128 bytes of `A-Z a-z 0-9 . _ @ + -`.
public struct UserID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: String

    /// The longest id, in bytes.
    public static let maxLength = 128

    /// Accepts `text` if it is a valid id, else `nil`.
    public init?(validating text: String) {
        guard Self.isValid(text) else { return nil }
        rawValue = text
    }

    /// Whether `text` follows the id rules (they are shared by user and group ids).
    public static func isValid(_ text: String) -> Bool {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count <= maxLength else { return false }
        return utf8.allSatisfy(isIDByte)
    }

    public static func < (lhs: UserID, rhs: UserID) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { rawValue }
}

@inline(__always)
func isIDByte(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"),
        UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "@"), UInt8(ascii: "+"), UInt8(ascii: "-"):
        true
    default:
        false
    }
}

/// A session token. The broker makes them (unguessable); the core only compares them.
public struct SessionID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }
}

/// One client connection, as the broker numbers them. Sessions remember the connection they were last used on,
/// so that the loss of a connection ends exactly the sessions that still live on it.
public struct ConnectionID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "#\(rawValue)" }
}
