/// Hands each value to every `AsyncStream` made from it and not yet ended: the SDK's streams of records, group
/// messages and connection states, each of which any number of tasks may read.
@MainActor
final class Broadcast<Element: Sendable> {
    private var continuations: [Int: AsyncStream<Element>.Continuation] = [:]
    private var nextID = 0

    /// A new stream of every value from now on; a reader that falls more than `buffering` behind loses the oldest.
    func stream(buffering: Int, startingWith first: Element? = nil) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(buffering))
        if let first { continuation.yield(first) }
        nextID += 1
        let id = nextID
        continuations[id] = continuation
        continuation.onTermination = { [weak self] _ in
            Task { @MainActor in self?.continuations[id] = nil }
        }
        return stream
    }

    func yield(_ value: Element) {
        for continuation in continuations.values { continuation.yield(value) }
    }

    func finish() {
        for continuation in continuations.values { continuation.finish() }
        continuations = [:]
    }
}
