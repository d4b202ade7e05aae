import RollCallClient
import RollCallCore
import RollCallWire
import ZeroMQ

/// Sends requests on one DEALER connection with up to `window` of them in flight, the way an app server relays
/// many sessions over a few connections. Belongs to one thread.
public final class RequestPipeline {
    private let context: Context
    private let socket: Socket
    private let window: Int
    private var inFlight = 0
    public private(set) var sent = 0
    public private(set) var failures = 0
    /// The last reply body seen, for requests whose answer matters.
    public private(set) var lastReply: [UInt8] = []
    /// When set, every reply body is kept here, in order (replies on one DEALER come back in request order).
    public var collected: [[UInt8]]?

    /// The most requests kept in flight by default: under half the broker's default `--command-hwm` (1,000).
    /// libzmq's pipes acknowledge reads in batches of half their high-water mark, so the broker's ROUTER may count
    /// up to 499 replies the client has already read as still queued; with 512 in flight it could find the queue
    /// full and drop a reply (silently, as a ROUTER does), and the pipeline would wait for it for ever.
    public static let safeWindow = 400

    public init(endpoint: String, window: Int = safeWindow, credentials: CurveCredentials? = nil) throws {
        context = try Context()
        socket = try Socket(context, .dealer)
        try socket.set(.linger(milliseconds: 0))
        try credentials?.apply(to: socket)
        try socket.set(.sendHighWaterMark(100_000))
        try socket.set(.receiveHighWaterMark(100_000))
        try socket.connect(endpoint)
        self.window = window
    }

    /// Sends one request body, first reading replies if the window is full.
    public func send(_ body: [UInt8]) throws {
        while inFlight >= window { try receive(wait: true) }
        try socket.send(body, wait: true)
        inFlight += 1
        sent += 1
        while inFlight > 0, try receive(wait: false) {}
    }

    /// Sends one request and returns its reply's fields (waits for every earlier reply first).
    public func call(_ request: Request) throws -> [JSONKey: JSON] {
        try send(Codec.encodeRequest(request))
        try drain()
        let reply = try Codec.decodeReply(lastReply)
        switch reply.result {
        case .success(let fields): return fields
        case .failure(let error): throw SupportError("\(request.op) failed: \(error.code.rawValue): \(error.message)")
        }
    }

    /// Waits for every outstanding reply.
    public func drain() throws {
        while inFlight > 0 { try receive(wait: true) }
    }

    @discardableResult
    private func receive(wait: Bool) throws -> Bool {
        if wait {
            var poller = Poller([socket])
            guard try poller.poll(timeout: 10_000)[0] else { throw SupportError("no reply within 10 s") }
        }
        guard let (frames, _) = try socket.receiveMessage() else { return false }
        inFlight -= 1
        let body = frames.last?.bytes ?? []
        // Every reply starts {"ok":true or {"ok":false; counting failures needs no parse.
        if body.count > 6 && body[6] != UInt8(ascii: "t") { failures += 1 }
        lastReply = body
        collected?.append(body)
        return true
    }
}
