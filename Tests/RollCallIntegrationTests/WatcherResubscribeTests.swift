import Foundation
import RollCallClient
import RollCallCore
import RollCallWire
import Synchronization
import Testing
import ZeroMQ

extension Integration {
    @Suite("PresenceWatcher: a subscription that brings nothing")
    struct WatcherResubscribeTests {
        /// A broker may drop a subscription it reads at a bad moment (CURVE, protocol §16.3). Against a stand-in
        /// XPUB that ignores the first subscription, the watcher subscribes again after about a second and gets the
        /// current record then.
        @Test func droppedSubscriptionIsMadeAgain() async throws {
            let context = try Context()
            let xpub = try Socket(context, .xpub)
            try xpub.set(.linger(milliseconds: 0))
            try xpub.set(.xpubVerbose(true))
            try xpub.bind("tcp://127.0.0.1:*")
            let endpoint = try xpub.lastEndpoint()
            let watcher = try PresenceWatcher(endpoint: endpoint, context: context)
            defer { watcher.close() }
            let got = Mutex<[PresenceRecord]>([])
            let started = ContinuousClock.now
            _ = watcher.observe("kim".id) { record in got.withLock { $0.append(record) } }

            let topic = Topic.presence("kim".id).bytes
            func nextSubscription(within milliseconds: Int) throws -> ContinuousClock.Instant? {
                guard let message = try xpub.receive(timeout: milliseconds) else { return nil }
                #expect(message[0] == [1] + topic)
                return .now
            }
            let first = try #require(try nextSubscription(within: 3_000))  // ignored, as a broker dropping it
            let second = try #require(try nextSubscription(within: 3_000))
            let gap = milliseconds(since: first) - milliseconds(since: second)
            print("the watcher subscribed again \(Int(gap)) ms after its first subscription")
            #expect(gap >= 900 && gap < 2_500)
            let record = PresenceRecord(
                user: "kim".id, status: .online, since: BrokerTime(milliseconds: 1), lastSeen: nil, sessions: 1, seq: 7)
            _ = try xpub.send(message: [topic, Codec.encodeRecord(record)])
            try await waitFor(seconds: 3) { got.withLock { !$0.isEmpty } }
            #expect(got.withLock { $0.map(\.seq) } == [7])
            #expect(milliseconds(since: started) < 5_000)
            // Once the state has come, nothing more is asked for.
            #expect(try xpub.receive(timeout: 1_500) == nil)
        }
    }
}
