import Foundation
import Testing
import ZeroMQ

#if canImport(Glibc)
    import Glibc
#endif

@Suite("ZeroMQ wrapper")
struct SocketTests {
    /// Frames sent as one message arrive whole, in order, with the more flag and the connection's descriptor.
    @Test func multipartRoundTripOverTCP() throws {
        let context = try Context()
        let router = try Socket(context, .router)
        try router.bind("tcp://127.0.0.1:*")
        let endpoint = try router.lastEndpoint()
        #expect(endpoint.hasPrefix("tcp://127.0.0.1:") && !endpoint.hasSuffix(":*"))
        let dealer = try Socket(context, .dealer)
        try dealer.set(.linger(milliseconds: 0))
        try dealer.connect(endpoint)
        #expect(try dealer.send(message: [[], Array("hello".utf8), []], wait: true))
        var poller = Poller([router])
        #expect(try poller.poll(timeout: 3_000) == [true])
        let (frames, truncated) = try #require(try router.receiveMessage(sourceDescriptor: true))
        #expect(!truncated)
        #expect(frames.count == 4)  // routing id + the three frames
        #expect(frames.map(\.more) == [true, true, true, false])
        #expect(frames[2].bytes == Array("hello".utf8))
        #expect(frames[1].bytes.isEmpty && frames[3].bytes.isEmpty)
        #expect(frames[1].sourceFD >= 0)
        // Without asking, no descriptor is read: only the broker matches requests to connections.
        #expect(try dealer.send(message: [Array("again".utf8)], wait: true))
        #expect(try poller.poll(timeout: 3_000) == [true])
        let (plain, _) = try #require(try router.receiveMessage())
        #expect(plain.allSatisfy { $0.sourceFD == -1 })
    }

    /// Receiving with nothing waiting is nil, not an error; a message with too many frames is cut and flagged.
    @Test func nothingWaitingAndTruncation() throws {
        let context = try Context()
        let pull = try Socket(context, .pull)
        try pull.bind("inproc://truncation")
        let push = try Socket(context, .push)
        try push.connect("inproc://truncation")
        #expect(try pull.receiveFrame() == nil)
        #expect(try pull.receiveMessage() == nil)
        try push.send(message: (0..<5).map { [UInt8($0)] }, wait: true)
        try push.send([9], wait: true)
        var poller = Poller([pull])
        _ = try poller.poll(timeout: 3_000)
        let (frames, truncated) = try #require(try pull.receiveMessage(maxFrames: 2))
        #expect(truncated)
        #expect(frames.map(\.bytes) == [[0], [1]])
        // The rest of the cut message was consumed: the next message is intact.
        #expect(try pull.receiveMessage(wait: true)?.frames.map(\.bytes) == [[9]])
    }

    /// libzmq's errors become typed errors naming the function and keeping errno.
    @Test func errorsAreTyped() throws {
        let context = try Context()
        let socket = try Socket(context, .router)
        do {
            try socket.bind("nonsense://x")
            Issue.record("bind of a bad endpoint succeeded")
        } catch let error as ZMQError {
            #expect(error.function == "zmq_bind")
            #expect(error.code == EPROTONOSUPPORT)
            #expect(!error.message.isEmpty)
        }
        let other = try Socket(context, .router)
        try other.bind("tcp://127.0.0.1:*")
        #expect(throws: ZMQError.self) { try socket.bind(try other.lastEndpoint()) }  // address in use
    }

    /// A PUB with no subscriber, or over its high-water mark, drops instead of blocking.
    @Test func publishNeverBlocks() throws {
        let context = try Context()
        let pub = try Socket(context, .pub)
        try pub.set(.sendHighWaterMark(10))
        try pub.bind("inproc://never-blocks")
        let sub = try Socket(context, .sub)
        try sub.set(.receiveHighWaterMark(10))
        try sub.set(.subscribe([]))
        try sub.connect("inproc://never-blocks")
        for _ in 0..<10_000 { #expect(try pub.send([1, 2, 3])) }
    }

    /// The waker makes a poll that would wait for ever return at once, from another thread.
    @Test func wakerInterruptsAPoll() async throws {
        let context = try Context()
        let (waker, socket) = try Waker.make(context: context, name: "test")
        // A thread of its own, not a task: this test blocks its thread in the poll, and with other suites blocking
        // theirs a task's wake-up waited past the poll's 5 s on two cores.
        let woken = DispatchSemaphore(value: 0)
        Thread {
            // The wake must come while the poll below waits (no event says it has begun); decides nothing.
            usleep(50_000)
            waker.wake()
            woken.signal()
        }.start()
        var poller = Poller([socket])
        let start = ContinuousClock.now
        #expect(try poller.poll(timeout: 5_000) == [true])
        #expect(ContinuousClock.now - start < .seconds(4))
        try socket.drain()
        #expect(try socket.receiveMessage() == nil)
        #expect(woken.wait(timeout: .now() + .seconds(5)) == .success)
        waker.close()
    }

    /// A ROUTER's monitor reports the connection of a peer and its disconnection when the peer closes.
    @Test func monitorReportsDisconnects() throws {
        let context = try Context()
        let router = try Socket(context, .router)
        try router.bind("tcp://127.0.0.1:*")
        let monitor = try router.monitor([.accepted, .disconnected], name: "monitor-test", context: context)
        let dealer = try Socket(context, .dealer)
        try dealer.set(.linger(milliseconds: 0))
        try dealer.connect(try router.lastEndpoint())
        var poller = Poller([monitor])
        _ = try poller.poll(timeout: 3_000)
        let accepted = try #require(try monitor.receiveMonitorEvent())
        #expect(accepted.kind == .accepted)
        dealer.close()
        _ = try poller.poll(timeout: 3_000)
        let disconnected = try #require(try monitor.receiveMonitorEvent())
        #expect(disconnected.kind == .disconnected)
        #expect(disconnected.value == accepted.value)  // the same file descriptor
    }

    /// A monitor stopped before its reader is closed leaves the context usable when the watched connection ends
    /// afterwards: libzmq sends monitor events from its I/O thread with a blocking send, so an event for a reader that
    /// is gone would stop every connection of the context for good.
    @Test func stoppedMonitorLeavesTheContextUsable() throws {
        let peers = try Context()
        let peer = try Socket(peers, .router)
        try peer.set(.linger(milliseconds: 0))
        try peer.bind("tcp://127.0.0.1:*")
        let context = try Context()
        let dealer = try Socket(context, .dealer)
        try dealer.set(.linger(milliseconds: 0))
        try dealer.set(.immediate(true))  // so that a send says when the connection is gone
        let monitor = try dealer.monitor([.disconnected], name: "stopped-monitor", context: context)
        try dealer.connect(try peer.lastEndpoint())
        #expect(try dealer.send(Array("up".utf8), wait: true))
        var peerPoller = Poller([peer])
        #expect(try peerPoller.poll(timeout: 3_000) == [true])

        try dealer.stopMonitor()
        monitor.close()
        peer.close()  // the dealer's connection ends now, with no reader for its event
        // Wait until libzmq has handled the end: the dealer has no connection left to send on.
        let deadline = ContinuousClock.now + .seconds(3)
        while try dealer.send(Array("gone?".utf8)), ContinuousClock.now < deadline { usleep(1_000) }

        let other = try Socket(peers, .router)
        try other.set(.linger(milliseconds: 0))
        try other.bind("tcp://127.0.0.1:*")
        let fresh = try Socket(context, .dealer)
        try fresh.set(.linger(milliseconds: 0))
        try fresh.connect(try other.lastEndpoint())
        #expect(try fresh.send(Array("still".utf8), wait: true))
        var otherPoller = Poller([other])
        let start = ContinuousClock.now
        #expect(try otherPoller.poll(timeout: 3_000) == [true], "the context's I/O thread is blocked")
        print(
            "a fresh connection of the same context after the watched one ended: through in \(ContinuousClock.now - start)"
        )
        dealer.close()
    }
}
