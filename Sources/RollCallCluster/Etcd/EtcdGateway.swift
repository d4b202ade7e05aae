import AsyncHTTPClient
import Foundation
import NIOCore
import Synchronization

/// etcd's JSON gateway over HTTP/1.1, through async-http-client: one `HTTPClient` per ``EtcdClient``, shared with
/// its watches, on NIO's process-wide event loop group (no threads of its own), shut down by ``shutdown()`` or, at
/// the latest, when the last of its users lets it go.
///
/// Callers block: a unary call waits on the `EventLoopFuture` of its response, a stream is read through
/// ``ResponseStream``. The futures are completed on NIO's event loop threads, which never wait for the caller, and
/// the caller is never one of them (NIO traps a `wait()` there), so a wait cannot deadlock, whichever thread the
/// caller is on: the cluster's own threads, or Swift Concurrency's shared ones (the tests call the client from
/// async tests). Bridging to AHC's async API instead would park the caller until a task on those shared threads
/// resumed, which cannot happen when every one of them is parked so.
final class EtcdGateway: Sendable {
    private let http: HTTPClient
    /// The one event loop that runs this client's requests, their connections and their callbacks. With AHC's
    /// default (any event loop for the request, whichever has an idle connection for the channel), the end of a
    /// request can reach its connection one hop after the response: a shutdown in that window (ClusterNode shuts
    /// its client down right after revoking its lease) closed the connection, and the late "connection idle" then
    /// crashed AHC 1.37.0 ("A connection that we don't know was released?", once in a full test run). On one event
    /// loop there is no hop, so no window.
    private let eventLoop: any EventLoop
    private let isShutDown = Atomic<Bool>(false)

    /// `connectTimeout` bounds one TCP connection attempt to one member.
    init(connectTimeout: Duration) {
        var configuration = HTTPClient.Configuration()
        configuration.timeout = HTTPClient.Configuration.Timeout(connect: TimeAmount(connectTimeout), read: nil)
        // The etcd client moves on to the next member itself: a refused connection fails the attempt at once, as
        // a plain socket would, instead of being retried with backoff until the attempt's deadline.
        configuration.connectionPool.retryConnectionEstablishment = false
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        eventLoop = http.eventLoopGroup.next()
    }

    deinit {
        // A client nobody shut down: close its connections in the background (AHC traps on a client dropped
        // while running).
        if !isShutDown.exchange(true, ordering: .acquiringAndReleasing) { http.shutdown { _ in } }
    }

    /// Closes every connection, failing the calls and streams still running, and returns when that is done. Calls
    /// after it fail with ``EtcdError/unreachable(_:_:)``.
    func shutdown() {
        guard !isShutDown.exchange(true, ordering: .acquiringAndReleasing) else { return }
        try? http.syncShutdown()
    }

    /// Sends `POST path` with a JSON body to `member` and returns the status and the whole body (a chunked reply,
    /// such as a keep-alive's, read to its end), all within `timeout`, connection included.
    func post(_ path: String, body: Data, to member: EtcdEndpoint, timeout: Duration) throws -> (
        status: Int, body: Data
    ) {
        do {
            let request = try Self.request(path, body: body, to: member)
            let response = try http.execute(
                request: request, eventLoop: .delegateAndChannel(on: eventLoop), deadline: .now() + TimeAmount(timeout)
            ).wait()
            return (Int(response.status.code), response.body.map { Data($0.readableBytesView) } ?? Data())
        } catch {
            throw Self.error(error, from: member)
        }
    }

    /// Sends `POST path` with a JSON body to `member` for a reply that streams (a watch): no deadline, the reader
    /// sets its own. Read it, and close it, through the returned stream.
    func openStream(_ path: String, body: Data, to member: EtcdEndpoint) -> ResponseStream {
        let stream = ResponseStream(member: member)
        do {
            let request = try Self.request(path, body: body, to: member)
            stream.attach(
                http.execute(
                    request: request, delegate: stream, eventLoop: .delegateAndChannel(on: eventLoop), deadline: nil))
        } catch {
            stream.close(Self.error(error, from: member))
        }
        return stream
    }

    private static func request(_ path: String, body: Data, to member: EtcdEndpoint) throws -> HTTPClient.Request {
        let host = member.host.contains(":") ? "[\(member.host)]" : member.host
        return try HTTPClient.Request(
            url: "http://\(host):\(member.port)\(path)", method: .POST,
            headers: ["Content-Type": "application/json"], body: .bytes(body))
    }

    /// What an AHC failure means for the etcd client: no answer in time, or no answer at all. Both send the call on
    /// to the next member (``EtcdError/isUnavailable``).
    static func error(_ error: any Error, from member: EtcdEndpoint) -> EtcdError {
        if let error = error as? EtcdError { return error }
        if let error = error as? HTTPClientError, error == .deadlineExceeded || error == .readTimeout {
            return .timedOut(member.description)
        }
        return .unreachable(member.description, "\(error)")
    }
}
