/// A CURVE certificate file in czmq's format (ZPL, ZeroMQ RFC 4), so that certificates made with czmq's tools and
/// with `rollcall keygen` can be used alike:
///
/// ```
/// #   ZeroMQ CURVE **Secret** Certificate
/// #   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.
///
/// metadata
/// curve
///     public-key = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
///     secret-key = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"
/// ```
///
/// A file with only `public-key` is a public certificate.
public struct Certificate: Equatable, Sendable {
    public var publicKey: CurveKey
    public var secretKey: CurveKey?

    public init(publicKey: CurveKey, secretKey: CurveKey?) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// Why a certificate cannot be read: the line (1-based) and what is wrong with it.
    public struct ParseError: Error, Equatable, CustomStringConvertible {
        public var line: Int
        public var message: String
        public var description: String { line > 0 ? "line \(line): \(message)" : message }
    }

    /// Reads a ZPL certificate: the `curve` section's `public-key` (required) and `secret-key` (optional).
    public init(zpl text: String) throws(ParseError) {
        var section: [String] = []  // the path of sections, by indent level
        var keys: [String: (value: String, line: Int)] = [:]
        // Lines end at "\n" or "\r\n" (Swift reads "\r\n" as one Character, so split the scalars).
        for (index, raw) in text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = index + 1
            var content = Substring(String(raw))
            if content.hasSuffix("\r") { content = content.dropLast() }
            let trimmed = content.drop { $0 == " " || $0 == "\t" }
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let indent = content.count - trimmed.count
            guard indent % 4 == 0 else {
                throw ParseError(line: line, message: "indentation must be 4 spaces per level")
            }
            let level = indent / 4
            guard level <= section.count else { throw ParseError(line: line, message: "indented under nothing") }
            section.removeLast(section.count - level)
            if let equals = trimmed.firstIndex(of: "=") {
                let name = trimmed[..<equals].trimmingSpaces
                var value = trimmed[trimmed.index(after: equals)...].trimmingSpaces
                if let quote = value.first, quote == "\"" || quote == "'" {
                    guard value.count >= 2, value.last == quote else {
                        throw ParseError(line: line, message: "value of \(name) has no closing quote")
                    }
                    value = String(value.dropFirst().dropLast())
                }
                keys[(section + [name]).joined(separator: "/")] = (value, line)
            } else {
                section.append(trimmed.trimmingSpaces)
            }
        }
        guard let publicText = keys["curve/public-key"] else {
            throw ParseError(line: 0, message: "no public-key in a curve section")
        }
        guard let publicKey = CurveKey(publicText.value) else {
            throw ParseError(line: publicText.line, message: "public-key is not 40 Z85 characters")
        }
        var secretKey: CurveKey?
        if let secretText = keys["curve/secret-key"] {
            guard let key = CurveKey(secretText.value) else {
                throw ParseError(line: secretText.line, message: "secret-key is not 40 Z85 characters")
            }
            secretKey = key
        }
        self.init(publicKey: publicKey, secretKey: secretKey)
    }

    /// The certificate in czmq's format; with the secret key when it has one.
    public var zpl: String {
        var lines = [
            "#   ZeroMQ CURVE \(secretKey == nil ? "Public" : "**Secret**") Certificate",
            secretKey == nil
                ? "#   Exchange securely, or use a secure mechanism to verify the contents"
                : "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.",
            "#   Made by rollcall keygen.",
            "",
            "metadata",
            "curve",
            "    public-key = \"\(publicKey.z85)\"",
        ]
        if let secretKey { lines.append("    secret-key = \"\(secretKey.z85)\"") }
        return lines.joined(separator: "\n") + "\n"
    }
}

extension Substring {
    var trimmingSpaces: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
