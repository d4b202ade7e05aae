import RollCallCore
import Testing

@Suite("Group pages")
struct GroupPagingTests {
    /// Pages of a group follow each other in id order with no member lost or repeated, and the last has no `next`.
    @Test func pagesCoverTheGroupOnce() {
        var h = Harness()
        let members = (0..<250).map { "u\($0)" }
        _ = h.define("big", members)
        var seen: [String] = []
        var after: UserID?
        var pages = 0
        repeat {
            let page = h.core.snapshot(of: "big".group, after: after, limit: 40, now: h.now)
            #expect(page.members.count <= 40)
            #expect(page.counts.total == 250)
            seen += page.members.map(\.user.rawValue)
            after = page.next
            pages += 1
        } while after != nil && pages < 100
        #expect(seen == members.sorted())
        #expect(pages == 7)
    }

    /// Small edits keep the members sorted: added ids land in order, removed ones are gone from the pages.
    @Test func editsKeepTheOrder() {
        var h = Harness()
        _ = h.define("g", ["b", "d", "f"])
        _ = h.group("g", GroupEdit(add: ["a".id, "e".id, "z".id], remove: ["d".id]))
        let page = h.core.snapshot(of: "g".group, after: nil, limit: .max, now: h.now)
        #expect(page.members.map(\.user.rawValue) == ["a", "b", "e", "f", "z"])
        #expect(page.next == nil)
        let rest = h.core.snapshot(of: "g".group, after: "c".id, limit: 2, now: h.now)
        #expect(rest.members.map(\.user.rawValue) == ["e", "f"])
        #expect(rest.next == "f".id)
    }
}
