import ZeroMQ

/// The broker's sockets, owned by the event loop's thread, and what a poll found ready on them.
struct LoopSockets {
    /// Requests and replies (ROUTER).
    let router: Socket
    /// Updates and subscriptions (XPUB).
    let xpub: Socket
    /// Wakes the loop when another thread left it work (LoopMailbox.swift).
    let wake: Socket
    /// The ROUTER's socket monitor: connections accepted and closed (EventLoop+Requests.swift).
    let monitor: Socket
    /// The ZAP handler's socket (RFC 27), with CURVE only: every handshake on either endpoint asks it.
    let zap: Socket?
    /// The XPUB's socket monitor, with CURVE only: subscribers that disconnect (Shell/UpdateEndpoint.swift).
    let xpubMonitor: Socket?

    /// What one poll found readable.
    struct Readiness {
        var requests = false
        var subscriptions = false
        var wake = false
        var connectionEvents = false
        var handshakes = false
        var subscriberDisconnects = false
    }

    /// Polls every socket for reading.
    struct ReadinessPoller {
        private var poller: Poller
        private let hasZap: Bool
        private let hasXpubMonitor: Bool

        init(_ sockets: LoopSockets) {
            poller = Poller(
                [sockets.router, sockets.xpub, sockets.wake, sockets.monitor]
                    + [sockets.zap, sockets.xpubMonitor].compactMap { $0 })
            hasZap = sockets.zap != nil
            hasXpubMonitor = sockets.xpubMonitor != nil
        }

        /// Waits at most `timeout` ms for any socket to be readable.
        mutating func poll(timeout: Int) throws -> Readiness {
            let ready = try poller.poll(timeout: timeout)
            // The optional sockets follow the four others, in this order, when they exist.
            var next = 4
            func optional(_ present: Bool) -> Bool {
                guard present else { return false }
                defer { next += 1 }
                return ready[next]
            }
            return Readiness(
                requests: ready[0], subscriptions: ready[1], wake: ready[2], connectionEvents: ready[3],
                handshakes: optional(hasZap), subscriberDisconnects: optional(hasXpubMonitor))
        }
    }

    /// Stops the monitors, then closes every socket. Monitors stop before their readers and sockets close:
    /// libzmq's I/O thread sends monitor events with a blocking send, and one sent to a closed reader would block
    /// it, and the context's termination, for good.
    func close() {
        try? router.stopMonitor()
        if xpubMonitor != nil { try? xpub.stopMonitor() }
        router.close()
        xpub.close()
        wake.close()
        monitor.close()
        zap?.close()
        xpubMonitor?.close()
    }
}
