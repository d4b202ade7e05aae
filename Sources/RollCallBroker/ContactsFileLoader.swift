import Foundation
import RollCallCore

/// Why a contacts file was not taken: the file, the line at fault (if the fault is in a line) and why.
public struct ContactsFileError: Error, Equatable, Sendable, CustomStringConvertible {
    public var path: String
    public var line: Int?
    public var reason: String
    public var description: String { line.map { "\(path):\($0): \(reason)" } ?? "\(path): \(reason)" }

    public init(path: String, line: Int?, reason: String) {
        self.path = path
        self.line = line
        self.reason = reason
    }
}

extension ContactsFile {
    /// Reads and parses the file at `path` (``ContactsFile/parse(_:maxContacts:)``): the lists, or why not, naming
    /// the file and the line. Reads the whole file at once; the caller runs it off the event loop.
    public static func load(path: String, maxContacts: Int) -> Result<[ContactList], ContactsFileError> {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            return .failure(ContactsFileError(path: path, line: nil, reason: "cannot be read (\(error))"))
        }
        return parse(data, maxContacts: maxContacts).mapError {
            ContactsFileError(path: path, line: $0.line, reason: $0.reason)
        }
    }
}

extension Duration {
    /// Whole milliseconds, for log lines.
    var wholeMilliseconds: Int64 { components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000 }
}
