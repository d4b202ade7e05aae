import Foundation
import RollCallCore

/// What a key may do (docs/protocol.md, security): a `user` key acts as one user only, an `operator` key as anyone,
/// a `reader` key only reads.
public enum Role: Equatable, Sendable {
    case user(UserID)
    case `operator`
    case reader
}

/// The authorized-keys file: one key per line, its role, and for a `user` key the user it is bound to.
///
/// ```
/// # public key (Z85, 40 chars)               role      user
/// Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID   user      alice
/// rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7   operator
/// ```
///
/// A comment is a line whose first non-blank character is `#`; a `#` inside a key is part of the key. Blank lines are
/// ignored. Any other line must be a key, a role and (for `user` only) a user id, separated by blanks.
public struct AuthorizedKeys: Equatable, Sendable {
    public private(set) var roles: [CurveKey: Role]

    public init(roles: [CurveKey: Role] = [:]) { self.roles = roles }

    /// Why the file cannot be used: the line (1-based) and what is wrong with it.
    public struct ParseError: Error, Equatable, CustomStringConvertible {
        public var line: Int
        public var message: String
        public var description: String { "line \(line): \(message)" }
    }

    /// Reads the file's text. The first malformed line is an error that names it: the whole file is refused, so that
    /// a reload keeps the table it had.
    public init(parsing text: String) throws(ParseError) {
        var roles: [CurveKey: Role] = [:]
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = index + 1
            let fields = raw.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            guard let first = fields.first, !first.hasPrefix("#") else { continue }
            guard let key = CurveKey(String(first)) else {
                throw ParseError(line: line, message: "'\(first.prefix(48))' is not a public key (40 Z85 characters)")
            }
            guard fields.count >= 2 else {
                throw ParseError(line: line, message: "a role must follow the key: user USER, operator or reader")
            }
            let role: Role
            switch fields[1] {
            case "user":
                guard fields.count == 3 else {
                    throw ParseError(line: line, message: "a user key names exactly one user: KEY user USER")
                }
                guard let user = UserID(validating: String(fields[2])) else {
                    throw ParseError(
                        line: line,
                        message: "'\(fields[2].prefix(48))' is not a user id (1 to 128 of A-Z a-z 0-9 . _ @ + -)")
                }
                role = .user(user)
            case "operator", "reader":
                guard fields.count == 2 else {
                    throw ParseError(line: line, message: "an \(fields[1]) key names no user: KEY \(fields[1])")
                }
                role = fields[1] == "operator" ? .operator : .reader
            default:
                throw ParseError(
                    line: line, message: "unknown role '\(fields[1].prefix(32))': user, operator or reader")
            }
            guard roles.updateValue(role, forKey: key) == nil else {
                throw ParseError(line: line, message: "key \(key) is listed twice")
            }
        }
        self.roles = roles
    }

    /// The role of `key`, or `nil` if it may not connect.
    public func role(of key: CurveKey) -> Role? { roles[key] }
}

/// Why an authorized-keys file cannot be used: it cannot be read, or a line is malformed.
public struct AuthorizedKeysError: Error, Equatable, Sendable, CustomStringConvertible {
    public var path: String
    public var reason: String
    public var description: String { "\(path): \(reason)" }

    public init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }
}

extension AuthorizedKeys {
    /// The largest authorized-keys file read: about 10,000 keys with comments.
    public static let maxFileBytes = 4 * 1_048_576

    /// Reads and parses the file at `path`: the whole file, or an error that names the line at fault.
    public static func load(path: String) -> Result<AuthorizedKeys, AuthorizedKeysError> {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            return .failure(AuthorizedKeysError(path: path, reason: "cannot be opened for reading"))
        }
        defer { try? handle.close() }
        let data: Data
        do {
            data = try handle.read(upToCount: maxFileBytes + 1) ?? Data()
        } catch {
            return .failure(AuthorizedKeysError(path: path, reason: "cannot be read (\(error.localizedDescription))"))
        }
        guard data.count <= maxFileBytes else {
            return .failure(AuthorizedKeysError(path: path, reason: "is larger than \(maxFileBytes) bytes"))
        }
        guard let text = String(data: data, encoding: .utf8) else {
            return .failure(AuthorizedKeysError(path: path, reason: "is not UTF-8 text"))
        }
        do {
            return .success(try AuthorizedKeys(parsing: text))
        } catch {
            return .failure(AuthorizedKeysError(path: path, reason: error.description))
        }
    }
}
