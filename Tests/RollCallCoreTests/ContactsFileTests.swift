import RollCallCore
import Testing

@Suite("Contacts file")
struct ContactsFileTests {
    static func parse(_ text: String, maxContacts: Int = 5) -> Result<[ContactList], ContactsFile.Fault> {
        ContactsFile.parse(Array(text.utf8), maxContacts: maxContacts)
    }

    /// Lines in order, blanks around names trimmed, comments and blank lines skipped, `user:` alone is no contacts,
    /// and CRLF line ends are taken.
    @Test func goodFile() throws {
        let text = """
            # the backend's graph, 2026-11-27

            alice: bob, carol
              bob :carol,alice\t\r
               # an indented comment
            carol:
            dave:   erin  \r

            """
        let lists = try Self.parse(text).get()
        #expect(
            lists == [
                ContactList(user: "alice".id, contacts: ["bob".id, "carol".id]),
                ContactList(user: "bob".id, contacts: ["carol".id, "alice".id]),
                ContactList(user: "carol".id, contacts: []),
                ContactList(user: "dave".id, contacts: ["erin".id]),
            ])
    }

    /// An empty file, or one of comments only, lists nobody.
    @Test(arguments: ["", "\n\n", "# nothing\n   \n#x: y\n"])
    func nothingListed(_ text: String) throws {
        #expect(try Self.parse(text).get().isEmpty)
    }

    /// Every fault names its line (counted from 1, blank lines and comments included) and refuses the whole file.
    @Test(arguments: [
        ("alice bob\n", 1, "no ':'"),
        ("# c\n\nalice: bob\nbob carol\n", 4, "no ':'"),
        ("al ice: bob\n", 1, "the user 'al ice' is not a valid user id"),
        (": bob\n", 1, "the user '' is not a valid user id"),
        ("alice: bob\nbob: carol, d!ve\n", 2, "the contact 'd!ve' is not a valid user id"),
        ("alice: bob,,carol\n", 1, "the contact '' is not a valid user id"),
        ("alice: bob, carol,\n", 1, "trailing"),
        ("alice: bob, alice\n", 1, "alice cannot be in their own contacts"),
        ("alice: bob, carol, bob\n", 1, "alice lists bob twice"),
        ("alice: bob\n\nalice: carol\n", 3, "alice is listed already on line 1"),
        ("alice: a1, a2, a3, a4, a5, a6\n", 1, "more than 5 contacts"),
        ("alice: bob\nbob: \(String(repeating: "x", count: 129))\n", 2, "is not a valid user id"),
        ("alice: b\u{00f6}b\n", 1, "is not a valid user id"),
    ])
    func faultNamesItsLine(_ text: String, line: Int, reason: String) throws {
        let result = Self.parse(text)
        guard case .failure(let fault) = result else {
            Issue.record("\(text) was taken: \(result)")
            return
        }
        #expect(fault.line == line, "\(text)")
        #expect(fault.reason.contains(reason), "\(fault.reason)")
        #expect(fault.description.hasPrefix("line \(line): "))
    }

    /// The bound is inclusive: exactly `maxContacts` contacts is taken, one more is not.
    @Test func boundIsInclusive() throws {
        let five = (1...5).map { "u\($0)" }.joined(separator: ", ")
        #expect(try Self.parse("alice: \(five)\n").get()[0].contacts.count == 5)
        #expect(throws: ContactsFile.Fault.self) { try Self.parse("alice: \(five), u6\n").get() }
    }

    /// The last line needs no line end; a 128-byte id (the longest) is taken.
    @Test func lastLineWithoutNewlineAndLongestID() throws {
        let longest = String(repeating: "z", count: 128)
        let lists = try Self.parse("alice: bob\n\(longest): alice").get()
        #expect(lists.count == 2 && lists[1].user == longest.id && lists[1].contacts == ["alice".id])
    }
}
