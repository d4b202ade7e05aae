import Foundation

/// The framing of etcd's streamed replies (watch): the gateway writes each message as one JSON object followed by a
/// newline, and HTTP may cut the stream anywhere. Bytes go in as they arrive; complete lines come out, blank ones
/// skipped.
struct JSONLines {
    private var buffer: [UInt8] = []
    /// Where the next line starts.
    private var start = 0
    /// How far the search for the next newline has looked already.
    private var scanned = 0

    /// Bytes waiting for the end of their line.
    var pendingCount: Int { buffer.count - start }

    /// Appends bytes as they arrived, cut anywhere.
    mutating func append(_ bytes: some Sequence<UInt8>) {
        if start > 0, start >= buffer.count / 2 {
            // Drop the lines already taken once they are half of the buffer: each byte moves at most once more.
            buffer.removeFirst(start)
            scanned -= start
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next complete line without its newline (or carriage return), or `nil` until more bytes arrive.
    mutating func next() -> Data? {
        while let newline = buffer[scanned...].firstIndex(of: UInt8(ascii: "\n")) {
            var end = newline
            if end > start, buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            let line = buffer[start..<end]
            start = newline + 1
            scanned = start
            if !line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\r") }) { return Data(line) }
        }
        scanned = buffer.count
        return nil
    }
}
