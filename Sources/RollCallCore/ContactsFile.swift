/// One user's contacts as a contacts file lists them (`--contacts-file`, docs/privacy.md).
public struct ContactList: Sendable, Equatable {
    public var user: UserID
    /// The whole list: it replaces the user's contacts, as op `contacts` with `set` does.
    public var contacts: Set<UserID>

    public init(user: UserID, contacts: Set<UserID>) {
        self.user = user
        self.contacts = contacts
    }
}

/// The contacts file: the app backend's social graph, one `user: contact, contact, …` per line. Blank lines and
/// lines whose first non-blank character is `#` are skipped; blanks around names are trimmed; `user:` alone sets no
/// contacts. Every line is checked as op `contacts` checks a `set`: valid ids, no name twice, not the user itself,
/// at most `maxContacts` contacts. A user on two lines is an error too (the backend's file says two things). The
/// first fault refuses the whole file, so that a load is all or nothing. Pure: the bytes come from the caller.
public enum ContactsFile {
    /// The lists of `bytes`, in the order of their lines, or the first fault.
    public static func parse<Bytes: Collection<UInt8>>(
        _ bytes: Bytes, maxContacts: Int
    ) -> Result<[ContactList], Fault> {
        if let parsed = bytes.withContiguousStorageIfAvailable({ parse(buffer: $0, maxContacts: maxContacts) }) {
            return parsed
        }
        return Array(bytes).withUnsafeBufferPointer { parse(buffer: $0, maxContacts: maxContacts) }
    }

    /// Why a file is refused: its line (from 1) and the reason.
    public struct Fault: Error, Equatable, Sendable, CustomStringConvertible {
        public var line: Int
        public var reason: String
        public var description: String { "line \(line): \(reason)" }

        public init(line: Int, _ reason: String) {
            self.line = line
            self.reason = reason
        }
    }

    private static func parse(buffer: UnsafeBufferPointer<UInt8>, maxContacts: Int) -> Result<[ContactList], Fault> {
        var lists: [ContactList] = []
        var lineOf: [UserID: Int] = [:]
        var start = 0
        var number = 0
        while start < buffer.count {
            number += 1
            var end = start
            while end < buffer.count && buffer[end] != UInt8(ascii: "\n") { end += 1 }
            let line = UnsafeBufferPointer(rebasing: buffer[start..<end])
            start = end + 1
            switch parseLine(line, number: number, maxContacts: maxContacts) {
            case .success(nil): continue
            case .success(let list?):
                if let earlier = lineOf.updateValue(number, forKey: list.user) {
                    return .failure(Fault(line: number, "\(list.user) is listed already on line \(earlier)"))
                }
                lists.append(list)
            case .failure(let fault): return .failure(fault)
            }
        }
        return .success(lists)
    }

    /// One line's list; `nil` for a blank line or a comment.
    private static func parseLine(
        _ line: UnsafeBufferPointer<UInt8>, number: Int, maxContacts: Int
    ) -> Result<ContactList?, Fault> {
        let whole = trimmed(line, 0, line.count)
        guard whole.lowerBound < whole.upperBound, line[whole.lowerBound] != UInt8(ascii: "#") else {
            return .success(nil)
        }
        guard let colon = line[whole].firstIndex(of: UInt8(ascii: ":")) else {
            return .failure(Fault(line: number, "no ':' after the user (expected 'user: contact, contact')"))
        }
        guard let user = name(line, trimmed(line, whole.lowerBound, colon)) else {
            return .failure(Fault(line: number, "the user \(quoted(line, trimmed(line, whole.lowerBound, colon)))"))
        }
        var contacts = Set<UserID>()
        let rest = trimmed(line, colon + 1, whole.upperBound)
        var from = rest.lowerBound
        while from < rest.upperBound {
            var to = from
            while to < rest.upperBound && line[to] != UInt8(ascii: ",") { to += 1 }
            let range = trimmed(line, from, to)
            guard let contact = name(line, range) else {
                return .failure(Fault(line: number, "the contact \(quoted(line, range))"))
            }
            guard contact != user else {
                return .failure(Fault(line: number, "\(user) cannot be in their own contacts"))
            }
            guard contacts.insert(contact).inserted else {
                return .failure(Fault(line: number, "\(user) lists \(contact) twice"))
            }
            guard contacts.count <= maxContacts else {
                return .failure(Fault(line: number, "\(user) lists more than \(maxContacts) contacts (--max-contacts)"))
            }
            // A trailing comma leaves an empty name, which is refused.
            from = to == rest.upperBound ? to : to + 1
            if to < rest.upperBound && from == rest.upperBound {
                return .failure(Fault(line: number, "the contact '' is not a valid user id (a trailing ',')"))
            }
        }
        return .success(ContactList(user: user, contacts: contacts))
    }

    /// The range inside `from..<to` without the blanks (space, tab, carriage return) at either end.
    private static func trimmed(_ line: UnsafeBufferPointer<UInt8>, _ from: Int, _ to: Int) -> Range<Int> {
        var lower = from
        var upper = to
        while lower < upper && isBlank(line[lower]) { lower += 1 }
        while upper > lower && isBlank(line[upper - 1]) { upper -= 1 }
        return lower..<upper
    }

    private static func isBlank(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\r")
    }

    /// The user id in `range`, if valid (the rules of §4.3, as everywhere in the protocol).
    private static func name(_ line: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> UserID? {
        UserID(validating: String(decoding: UnsafeBufferPointer(rebasing: line[range]), as: UTF8.self))
    }

    /// `'text' is not a valid user id`, the text cut to 40 bytes.
    private static func quoted(_ line: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> String {
        let text = String(decoding: UnsafeBufferPointer(rebasing: line[range]).prefix(40), as: UTF8.self)
        return "'\(text)' is not a valid user id"
    }
}
