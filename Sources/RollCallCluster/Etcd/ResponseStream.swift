import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// One streaming reply (a watch), handed from async-http-client's event loop to the thread that reads it with
/// blocking calls: the event loop appends what arrives and signals; the reader waits on the condition, with a
/// deadline where it has one. The event loop never waits: a reader more than ``highWater`` bytes behind holds the
/// next body part back (AHC stops reading the socket) until it has taken what is there.
///
/// ``close(_:)`` ends the stream for its reader at once, from any thread, and cancels the request.
final class ResponseStream: HTTPClientResponseDelegate, @unchecked Sendable {
    typealias Response = Void

    /// How many bytes may wait for the reader before the connection's reads pause.
    static let highWater = 1 << 20

    private enum End {
        case finished
        case failed(EtcdError)
    }

    let member: EtcdEndpoint
    /// Guards every variable below (hence `@unchecked Sendable`), and wakes the reader.
    private let condition = NSCondition()
    private var task: HTTPClient.Task<Void>?
    private var status: Int?
    private var pending: [UInt8] = []
    private var end: End?
    /// The event loop's permission to hand over the next body part, held while the reader is behind.
    private var paused: EventLoopPromise<Void>?

    init(member: EtcdEndpoint) { self.member = member }

    /// Keeps the request, to cancel it on ``close(_:)``; cancels it now if the stream was closed already.
    func attach(_ task: HTTPClient.Task<Void>) {
        let closed = locked {
            self.task = task
            return end != nil
        }
        if closed { task.cancel() }
    }

    /// Ends the stream for its reader with `error`, unless it ended already, and cancels the request. Safe from any
    /// thread; the reader's wait returns at once.
    func close(_ error: EtcdError) {
        let (task, paused) = locked {
            if end == nil { end = .failed(error) }
            condition.broadcast()
            defer { self.paused = nil }
            return (self.task, self.paused)
        }
        paused?.succeed()
        task?.cancel()
    }

    // MARK: - The reader's side

    /// Waits until the reply's status arrives, at most until `deadline`.
    func waitForStatus(until deadline: ContinuousClock.Instant) throws -> Int {
        try locked {
            while true {
                if let status { return status }
                if case .failed(let error) = end { throw error }
                if end != nil { throw EtcdError.protocolError("a reply without a status") }
                guard wait(until: deadline) else { throw EtcdError.timedOut(member.description) }
            }
        }
    }

    /// The bytes that arrived since the last call, waiting for some until `deadline` (none: as long as it takes);
    /// `nil` once the body has ended. Throws what ended it otherwise, or ``EtcdError/timedOut(_:)`` at `deadline`.
    func next(until deadline: ContinuousClock.Instant? = nil) throws -> [UInt8]? {
        let (bytes, paused): ([UInt8]?, EventLoopPromise<Void>?) = try locked {
            while pending.isEmpty {
                switch end {
                case .failed(let error): throw error
                case .finished: return (nil, nil)
                case nil: guard wait(until: deadline) else { throw EtcdError.timedOut(member.description) }
                }
            }
            defer {
                pending = []
                self.paused = nil
            }
            return (pending, self.paused)
        }
        paused?.succeed()
        return bytes
    }

    /// The rest of the body, read until it ends or `deadline` passes.
    func readToEnd(until deadline: ContinuousClock.Instant) throws -> [UInt8] {
        var all: [UInt8] = []
        while let bytes = try next(until: deadline) { all += bytes }
        return all
    }

    // MARK: - The event loop's side

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        locked {
            status = Int(head.status.code)
            condition.broadcast()
        }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        locked {
            // A reader that left takes nothing more.
            guard end == nil else { return task.eventLoop.makeSucceededVoidFuture() }
            pending.append(contentsOf: buffer.readableBytesView)
            condition.broadcast()
            guard pending.count > Self.highWater else { return task.eventLoop.makeSucceededVoidFuture() }
            let promise = task.eventLoop.makePromise(of: Void.self)
            paused = promise
            return promise.futureResult
        }
    }

    func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {
        finish(.failed(EtcdGateway.error(error, from: member)))
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws { finish(.finished) }

    private func finish(_ how: End) {
        locked {
            if end == nil { end = how }
            condition.broadcast()
        }
    }

    // MARK: - The lock

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        condition.lock()
        defer { condition.unlock() }
        return try body()
    }

    /// Waits on the condition (the lock held); returns `false` once `deadline` has passed.
    private func wait(until deadline: ContinuousClock.Instant?) -> Bool {
        guard let deadline else {
            condition.wait()
            return true
        }
        let left = ContinuousClock.now.duration(to: deadline)
        guard left > .zero else { return false }
        let seconds = Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18
        _ = condition.wait(until: Date(timeIntervalSinceNow: seconds))
        return true
    }
}
