/// A CurveZMQ key as RollCall's files hold it: 40 characters of Z85 (ZeroMQ RFC 32) encoding 32 bytes. A key may
/// contain `#`, `=` or `$` (never a quote or a blank); only its length and alphabet are checked here, libzmq checks
/// the rest when it is used.
public struct CurveKey: Hashable, Sendable, CustomStringConvertible {
    public let z85: String

    /// Z85's 85 characters.
    static let alphabet = Set(
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#".utf8)

    /// Accepts `text` if it is 40 Z85 characters.
    public init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 40, bytes.allSatisfy(Self.alphabet.contains) else { return nil }
        z85 = text
    }

    /// A key is shown by its first eight characters only: enough to tell keys apart in a log, never a secret.
    public var description: String { String(z85.prefix(8)) + "…" }
}
