import RollCallCluster
import Testing

/// The node's membership state machine, driven by hand with a clock in milliseconds: no etcd, no sockets.
@Suite struct NodeMembershipTests {
    let configuration = NodeMembership.Configuration(leaseMs: 6_000)

    /// Joins: takes the node from start to live with lease 7, at t = 100 ms.
    func joined() -> NodeMembership {
        var membership = NodeMembership(configuration: configuration)
        #expect(membership.handle(.start(nowMs: 0)) == [.grantLease])
        #expect(membership.handle(.leaseGranted(7, nowMs: 50)) == [.register(lease: 7)])
        #expect(membership.handle(.snapshotLoaded(revision: 40, nowMs: 100)) == [.report(.live(lease: 7))])
        return membership
    }

    /// A node goes live only once it has a lease, is registered and has its snapshot, and renews its lease every
    /// third of it, counted from the grant.
    @Test func joinsThenKeepsTheLeaseAlive() {
        var membership = joined()
        #expect(membership.state == .live(lease: 7))
        #expect(membership.nextDeadlineMs == 2_050)
        #expect(membership.handle(.tick(nowMs: 2_000)).isEmpty)
        // Nothing written since joining: a probe goes with the keep-alive, so the watch has something to bring back.
        #expect(membership.handle(.tick(nowMs: 2_100)) == [.keepAlive(lease: 7), .probe(lease: 7)])
        #expect(membership.handle(.tick(nowMs: 2_200)).isEmpty)  // One call at a time.
        #expect(membership.handle(.keepAliveAnswered(leaseAlive: true, nowMs: 2_100)).isEmpty)
        #expect(membership.handle(.wrote(revision: 41, nowMs: 2_100)).isEmpty)
        #expect(membership.handle(.watched(revision: 41)).isEmpty)
        #expect(membership.handle(.tick(nowMs: 4_200)) == [.keepAlive(lease: 7), .probe(lease: 7)])
        #expect(membership.state == .live(lease: 7))
    }

    /// Failing to reach etcd while joining retries after a pause, with a new lease, and counts the attempts.
    @Test func retriesAJoinThatFails() {
        var membership = NodeMembership(configuration: configuration)
        _ = membership.handle(.start(nowMs: 0))
        #expect(membership.handle(.callFailed(nowMs: 1_000)).isEmpty)
        #expect(membership.state == .joining(attempt: 1))
        #expect(membership.handle(.tick(nowMs: 1_500)).isEmpty)
        #expect(membership.handle(.tick(nowMs: 2_000)) == [.grantLease])
        #expect(membership.handle(.leaseGranted(9, nowMs: 2_000)) == [.register(lease: 9)])
        #expect(membership.handle(.callFailed(nowMs: 2_100)).isEmpty)
        #expect(membership.handle(.tick(nowMs: 3_100)) == [.grantLease])
        #expect(membership.handle(.leaseGranted(10, nowMs: 3_100)) == [.register(lease: 10)])
        #expect(membership.handle(.snapshotLoaded(revision: 5, nowMs: 3_200)) == [.report(.live(lease: 10))])
    }

    /// Without an answer from etcd for two thirds of the lease, the node says it is cut off, before etcd can have
    /// expired the lease; an answer with the lease still there makes it live again.
    @Test func cutOffBeforeTheLeaseCanExpireAndBack() {
        var membership = joined()
        _ = membership.handle(.tick(nowMs: 2_100))
        // The keep-alive sent at 2_100 fails: not yet cut off (the lease was granted at 50).
        #expect(membership.handle(.callFailed(nowMs: 3_100)).isEmpty)
        #expect(membership.state == .live(lease: 7))
        // At 50 + 4_000 the node is cut off; at 2_100 + 2_000 it tries again.
        #expect(membership.handle(.tick(nowMs: 4_049)).isEmpty)
        #expect(membership.handle(.tick(nowMs: 4_050)) == [.report(.cutOff(lease: 7, sinceMs: 4_050))])
        #expect(membership.handle(.tick(nowMs: 4_100)) == [.keepAlive(lease: 7)])
        #expect(membership.state.isLive == false)
        // Cut off, it retries sooner than every third of the lease.
        #expect(membership.handle(.callFailed(nowMs: 4_200)).isEmpty)
        #expect(membership.handle(.tick(nowMs: 5_200)) == [.keepAlive(lease: 7)])
        // A keep-alive that finds the lease alive ends the cut-off.
        #expect(membership.handle(.keepAliveAnswered(leaseAlive: true, nowMs: 5_200)) == [.report(.live(lease: 7))])
    }

    /// The window in which the node serves is the lease less the margin (a third), counted from when the last
    /// renewal that etcd answered was sent, not from when its answer came: a request just inside it is served, one
    /// just past it is not.
    @Test func theWindowRunsFromTheRenewalsSending() {
        var membership = joined()
        #expect(configuration.safetyMarginMs == 2_000)
        #expect(membership.handle(.tick(nowMs: 2_050)) == [.keepAlive(lease: 7)])
        // The keep-alive sent at 2_050 is answered late, at 2_900: the window runs from 2_050.
        #expect(membership.handle(.keepAliveAnswered(leaseAlive: true, nowMs: 2_050)).isEmpty)
        let window = membership.window
        #expect(window.servingUntilMs == 6_050)  // 2_050 + the lease (6_000) - the margin (2_000)
        #expect(window.accepts(nowMs: 2_900))
        #expect(window.accepts(nowMs: 6_049))
        #expect(!window.accepts(nowMs: 6_050))
        #expect(!window.accepts(nowMs: 6_900))
        // The machine's own state follows at the same moment.
        _ = membership.handle(.callFailed(nowMs: 4_050))
        _ = membership.handle(.tick(nowMs: 6_049))
        #expect(membership.state == .live(lease: 7))
        #expect(membership.handle(.tick(nowMs: 6_050)).contains(.report(.cutOff(lease: 7, sinceMs: 6_050))))
        #expect(!membership.window.accepts(nowMs: 6_050))
    }

    /// A renewal answered while the node is cut off opens the window again, from that renewal's sending.
    @Test func aRenewalReopensTheWindow() {
        var membership = joined()
        #expect(
            membership.handle(.tick(nowMs: 4_050)) == [
                .report(.cutOff(lease: 7, sinceMs: 4_050)), .keepAlive(lease: 7),
            ])
        #expect(!membership.window.accepts(nowMs: 4_050))
        #expect(membership.handle(.keepAliveAnswered(leaseAlive: true, nowMs: 4_050)) == [.report(.live(lease: 7))])
        #expect(membership.window.accepts(nowMs: 8_049))
        #expect(!membership.window.accepts(nowMs: 8_050))
    }

    /// A renewal that fails while the node is live is tried again after the retry pause, not a third of the lease
    /// later, so that one lost keep-alive does not close the window.
    @Test func aFailedRenewalIsRetriedBeforeTheWindowCloses() {
        var membership = joined()
        #expect(membership.handle(.tick(nowMs: 2_050)) == [.keepAlive(lease: 7)])
        #expect(membership.handle(.callFailed(nowMs: 2_050)).isEmpty)
        #expect(membership.nextDeadlineMs == 3_050)
        #expect(membership.handle(.tick(nowMs: 3_049)).isEmpty)
        #expect(membership.handle(.tick(nowMs: 3_050)).contains(.keepAlive(lease: 7)))
        _ = membership.handle(.keepAliveAnswered(leaseAlive: true, nowMs: 3_050))
        #expect(!membership.handle(.tick(nowMs: 4_050)).contains(.report(.cutOff(lease: 7, sinceMs: 4_050))))
        #expect(membership.window.accepts(nowMs: 7_049))
        #expect(!membership.window.accepts(nowMs: 7_050))
    }

    /// Only renewals move the window: the node's writes (a probe, a session's change) show that etcd had the lease
    /// then, not that it will keep it; the join counts from the grant, not from the snapshot.
    @Test func writesAndTheJoinDoNotRenew() {
        var membership = joined()
        // Granted at 50, live at 100: the window ends at 50 + 4_000.
        #expect(membership.window.servingUntilMs == 4_050)
        _ = membership.handle(.wrote(revision: 41, nowMs: 3_000))
        _ = membership.handle(.watched(revision: 41))
        #expect(membership.window.servingUntilMs == 4_050)
        #expect(!membership.window.accepts(nowMs: 4_050))
    }

    /// A node that is joining, cut off or stopped serves nothing, at any time.
    @Test func onlyALiveNodeServes() {
        var membership = NodeMembership(configuration: configuration)
        _ = membership.handle(.start(nowMs: 0))
        _ = membership.handle(.leaseGranted(7, nowMs: 50))
        #expect(!membership.window.accepts(nowMs: 60))  // granted, not yet registered
        _ = membership.handle(.snapshotLoaded(revision: 1, nowMs: 100))
        #expect(membership.window.accepts(nowMs: 100))
        _ = membership.handle(.stop)
        #expect(!membership.window.accepts(nowMs: 100))
    }

    /// A lease found gone (it expired while the node was cut off) makes the node join again with a new lease.
    @Test func rejoinsWhenTheLeaseIsGone() {
        var membership = joined()
        _ = membership.handle(.tick(nowMs: 2_100))
        #expect(
            membership.handle(.keepAliveAnswered(leaseAlive: false, nowMs: 2_100)) == [
                .report(.joining(attempt: 0)), .grantLease,
            ])
        #expect(membership.handle(.leaseGranted(8, nowMs: 2_200)) == [.register(lease: 8)])
        #expect(membership.handle(.snapshotLoaded(revision: 90, nowMs: 2_300)) == [.report(.live(lease: 8))])
    }

    /// A write of the node's own that does not come back through the watch within the lag limit restarts the
    /// watch; one that comes back in time does not.
    @Test func restartsASilentWatch() {
        var membership = joined()
        _ = membership.handle(.wrote(revision: 50, nowMs: 200))
        _ = membership.handle(.watched(revision: 50))
        #expect(membership.handle(.tick(nowMs: 2_100)) == [.keepAlive(lease: 7)])
        _ = membership.handle(.keepAliveAnswered(leaseAlive: true, nowMs: 2_100))
        _ = membership.handle(.wrote(revision: 60, nowMs: 2_200))
        _ = membership.handle(.watched(revision: 59))
        #expect(membership.handle(.tick(nowMs: 4_199)).contains(.restartWatch) == false)
        #expect(membership.handle(.tick(nowMs: 4_200)).contains(.restartWatch))
        // Asked once per lagging write.
        #expect(membership.handle(.tick(nowMs: 4_300)).contains(.restartWatch) == false)
    }

    /// A watch behind compaction asks for a fresh snapshot.
    @Test func resyncsAfterCompaction() {
        var membership = joined()
        #expect(membership.handle(.watchCompacted) == [.resync])
        #expect(membership.state == .live(lease: 7))
    }

    /// Stopping a live node revokes its lease, so that its sessions end everywhere at once; a stopped node does
    /// nothing more.
    @Test func stopRevokesTheLease() {
        var membership = joined()
        #expect(membership.handle(.stop) == [.report(.stopped), .revoke(lease: 7)])
        #expect(membership.handle(.tick(nowMs: 10_000)).isEmpty)
        #expect(membership.handle(.start(nowMs: 10_000)).isEmpty)
    }

    /// The lease in whole seconds rounds up, and the derived intervals keep their order: renew < cut off < lease.
    @Test(arguments: [2_000, 2_500, 5_000, 60_000] as [Int64])
    func derivedIntervals(_ leaseMs: Int64) {
        let configuration = NodeMembership.Configuration(leaseMs: leaseMs)
        #expect(configuration.leaseSeconds * 1_000 >= leaseMs)
        #expect(configuration.keepAliveIntervalMs < configuration.cutOffAfterMs)
        #expect(configuration.cutOffAfterMs < configuration.leaseMs)
    }
}
