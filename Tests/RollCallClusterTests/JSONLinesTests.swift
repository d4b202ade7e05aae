import Foundation
import Testing

@testable import RollCallCluster

@Suite struct JSONLinesTests {
    static let stream = Array(
        "{\"result\":{\"created\":true}}\n\r\n{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\"}}]}}\r\n\n{\"n\":3}\n"
            .utf8)
    static let objects = [
        "{\"result\":{\"created\":true}}", "{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\"}}]}}", "{\"n\":3}",
    ]

    /// A streamed reply cut into two pieces at any byte gives the same objects, in order, without their line ends,
    /// blank lines skipped.
    @Test func cutAnywhere() {
        for cut in 0...Self.stream.count {
            var lines = JSONLines()
            var objects: [String] = []
            for piece in [Self.stream[..<cut], Self.stream[cut...]] {
                lines.append(piece)
                while let line = lines.next() { objects.append(String(decoding: line, as: UTF8.self)) }
            }
            #expect(objects == Self.objects, "cut at \(cut)")
            #expect(lines.pendingCount == 0)
        }
    }

    /// Fed one byte at a time, many replies come out whole, and what waits for its newline stays counted.
    @Test func byteByByte() {
        var lines = JSONLines()
        var count = 0
        for _ in 0..<200 {
            for byte in Self.stream {
                lines.append([byte])
                while lines.next() != nil { count += 1 }
            }
        }
        #expect(count == 600)
        lines.append(Array("{\"partial\":".utf8))
        #expect(lines.next() == nil)
        #expect(lines.pendingCount == 11)
    }
}
