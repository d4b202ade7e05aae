import Testing

@testable import RollCallBroker

/// The subscriptions gauge's bookkeeping, in both XPUB modes.
@Suite("Topic counts")
struct TopicCountsTests {
    static let alice = Array("presence/alice/".utf8)
    static let bob = Array("presence/bob/".utf8)

    /// Verbose mode passes every subscription but only the last unsubscription: one unsubscription empties a topic.
    @Test func verboseModeCountsTopics() {
        var counts = TopicCounts(manual: false)
        counts.subscribed(Self.alice)
        counts.subscribed(Self.alice)
        counts.subscribed(Self.bob)
        #expect(counts.count == 2)
        let left = counts.unsubscribed(Self.alice)
        #expect(left)
        #expect(counts.count == 1)
    }

    /// Manual mode passes every unsubscription: a topic empties when its last subscriber leaves.
    @Test func manualModeCountsSubscribers() {
        var counts = TopicCounts(manual: true)
        counts.subscribed(Self.alice)
        counts.subscribed(Self.alice)
        let first = counts.unsubscribed(Self.alice)
        #expect(!first)
        #expect(counts.count == 1)
        let last = counts.unsubscribed(Self.alice)
        #expect(last)
        #expect(counts.count == 0)
        let stray = counts.unsubscribed(Self.bob)
        #expect(!stray)
    }

    /// Past the limit, new topics are not tracked; known ones still are.
    @Test func trackingIsBounded() {
        var counts = TopicCounts(manual: true, limit: 1)
        counts.subscribed(Self.alice)
        counts.subscribed(Self.bob)
        counts.subscribed(Self.alice)
        #expect(counts.count == 1)
        let bobLeft = counts.unsubscribed(Self.bob)
        #expect(!bobLeft)
        let first = counts.unsubscribed(Self.alice)
        let last = counts.unsubscribed(Self.alice)
        #expect([first, last] == [false, true])
    }
}
