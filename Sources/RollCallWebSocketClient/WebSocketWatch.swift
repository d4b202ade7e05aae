import HummingbirdWSClient
import RollCallClientCore
import RollCallCore
import RollCallWire

/// Follows users, groups and the broker's heartbeat over one WebSocket connection of its own: a thin shell that
/// carries out what ``WatchMachine`` decides (the seq rule, current value first, resync after a recovery, a restart
/// or `dropped`, broker liveness from `broker/`, reconnection with the session machine's jittered backoff).
///
/// Topics can be followed and unfollowed at any time; each change goes out on the live connection (`subscribe`,
/// `unsubscribe`), or with the next one. Everything the watch learns is handed to `onEvent`, one call at a time, on
/// the watch's own task: keep it short (the SDK's store hops to the main actor from there).
public final class WebSocketWatch: Sendable {
    /// What the watch tells.
    public enum Event: Sendable, Equatable {
        /// A record of a followed user, newer than the last one told (or the current one a subscription brought).
        case record(PresenceRecord)
        /// A message of a followed group (its `changed` records already passed the seq rule).
        case group(GroupUpdate)
        /// The broker's heartbeat began, stopped, came back, or shows a restart or drops.
        case broker(WatchMachine.BrokerEvent)
        /// A heartbeat came, sent at this broker time: for estimating the broker's clock against the device's.
        case heartbeat(brokerTime: Int64)
        /// The connection opened (its subscriptions are on their way).
        case connected
        /// The connection ended or could not be made, with its close code if there was one; the next attempt is in
        /// `retryIn` ms (0: at once).
        case disconnected(code: UInt16?, retryIn: Int64)
    }

    private enum Input: Sendable {
        case follow(Topic)
        case unfollow(Topic)
        case reconnectNow
        case close
        case opened(generation: Int)
        case frame(generation: Int, bytes: [UInt8])
        case ended(generation: Int, code: UInt16?)
        case timer(token: Int)
    }

    private let inputs: AsyncStream<Input>.Continuation
    private let task: Task<Void, Never>

    /// A watch of `url` (`ws://HOST:PORT/v1/ws`) that connects at once and keeps connecting until ``close()``.
    /// `tokenProvider` is asked for a token before each connection (or `token` is used). `seed` fixes the
    /// backoff's jitter, for tests.
    public init(
        url: String, token: String? = nil, tokenProvider: (@Sendable () async throws -> String)? = nil,
        seed: UInt64 = .random(in: 1...UInt64.max), onEvent: @escaping @Sendable (Event) -> Void
    ) {
        let (stream, inputs) = AsyncStream<Input>.makeStream()
        self.inputs = inputs
        let shell = Shell(
            url: url, token: token, tokenProvider: tokenProvider, inputs: inputs, onEvent: onEvent,
            machine: WatchMachine(configuration: .webSocket, now: 0, seed: seed))
        task = Task { await shell.run(stream) }
    }

    /// Follows `topic` (`.presence(user)`, `.group(id)`, `.allPresence`): its current value comes first.
    public func follow(_ topic: Topic) { inputs.yield(.follow(topic)) }

    /// Stops following `topic` once (it is unsubscribed when every follow of it is taken back).
    public func unfollow(_ topic: Topic) { inputs.yield(.unfollow(topic)) }

    /// The network is back: connect at once rather than after the backoff.
    public func reconnectNow() { inputs.yield(.reconnectNow) }

    /// Closes the connection and stops; no event is told after this returns.
    public func close() async {
        inputs.yield(.close)
        await task.value
    }

    /// The watch's task and everything it owns; only that task touches it.
    private final class Shell: @unchecked Sendable {
        let url: String
        var token: String?
        let tokenProvider: (@Sendable () async throws -> String)?
        let inputs: AsyncStream<Input>.Continuation
        let onEvent: @Sendable (Event) -> Void
        var machine: WatchMachine
        var connection: (generation: Int, outgoing: AsyncStream<String?>.Continuation)?
        var generation = 0
        var timerToken = 0
        var timer: Task<Void, Never>?
        var nextID: Int64 = 0
        /// The users each unanswered `query` asked for, by its id: a paged answer asks for the rest.
        var queries: [Int64: [UserID]] = [:]
        /// The topics of each unanswered resume (`subscribe` with `after`), by its id: a refusal subscribes afresh.
        var resumes: [Int64: [Topic]] = [:]
        /// The id of this connection's `ping`, whose answer names the broker's presence log.
        var ping: Int64?
        let start = ContinuousClock.now

        init(
            url: String, token: String?, tokenProvider: (@Sendable () async throws -> String)?,
            inputs: AsyncStream<Input>.Continuation, onEvent: @escaping @Sendable (Event) -> Void,
            machine: WatchMachine
        ) {
            self.url = url
            self.token = token
            self.tokenProvider = tokenProvider
            self.inputs = inputs
            self.onEvent = onEvent
            self.machine = machine
        }

        /// Monotonic milliseconds since the watch began: the machine's clock.
        var now: Int64 {
            let elapsed = ContinuousClock.now - start
            return elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        }

        func run(_ stream: AsyncStream<Input>) async {
            await perform(machine.tick(now: now))
            for await input in stream {
                switch input {
                case .follow(let topic): await perform(machine.follow(topic, now: now))
                case .unfollow(let topic): await perform(machine.unfollow(topic))
                case .reconnectNow: await perform(machine.reconnectNow(now: now))
                case .close:
                    machine.close()
                    timer?.cancel()
                    disconnect()
                    // Nothing reads the inputs any more: what the closing connection still says is dropped.
                    inputs.finish()
                    return
                case .opened(let from) where from == connection?.generation:
                    onEvent(.connected)
                    nextID += 1
                    ping = nextID
                    send(String(decoding: Codec.encodeRequest(.ping, id: .number(String(nextID))), as: UTF8.self))
                    await perform(machine.connected(now: now))
                case .frame(let from, let bytes) where from == connection?.generation:
                    await perform(received(bytes))
                case .ended(let from, let code) where from == connection?.generation:
                    connection = nil
                    queries = [:]
                    resumes = [:]
                    ping = nil
                    let actions = machine.disconnected(now: now)
                    var retryIn: Int64 = 0
                    for case .reconnectAfter(let wait) in actions { retryIn = wait }
                    onEvent(.disconnected(code: code, retryIn: retryIn))
                    await perform(actions)
                case .timer(let token) where token == timerToken:
                    await perform(machine.tick(now: now))
                default:
                    continue  // a stale connection's news, or a stale timer
                }
                schedule()
            }
        }

        /// Sets the one timer to the machine's next deadline.
        private func schedule() {
            timer?.cancel()
            timerToken += 1
            guard let deadline = machine.nextDeadline else { return }
            timer = Task { [inputs, token = timerToken, delay = max(0, deadline - now)] in
                guard (try? await Task.sleep(for: .milliseconds(delay))) != nil else { return }
                inputs.yield(.timer(token: token))
            }
        }

        private func perform(_ actions: [WatchMachine.Action]) async {
            for action in actions {
                switch action {
                case .connect: await connect()
                case .closeConnection: disconnect()
                case .reconnectAfter: break  // told with the disconnection
                case .subscribe(let topics), .resubscribe(let topics):
                    // In requests of 100 topics: a connection that follows many users does not send one frame
                    // larger than the broker's --max-message-bytes.
                    for start in stride(from: 0, to: topics.count, by: 100) {
                        send(Self.request("subscribe", Array(topics[start..<min(start + 100, topics.count)])))
                    }
                case .resume(let topics, let after, let logEpoch):
                    for start in stride(from: 0, to: topics.count, by: 100) {
                        let chunk = Array(topics[start..<min(start + 100, topics.count)])
                        nextID += 1
                        resumes[nextID] = chunk
                        send(Self.request("subscribe", chunk, id: nextID, after: after, logEpoch: logEpoch))
                    }
                case .unsubscribe(let topics): send(Self.request("unsubscribe", topics))
                case .query(let users): query(users)
                case .deliver(let record): onEvent(.record(record))
                case .deliverGroup(let update): onEvent(.group(update))
                case .broker(let change): onEvent(.broker(change))
                }
            }
        }

        private func send(_ text: String) { connection?.outgoing.yield(text) }

        private func query(_ users: [UserID]) {
            guard !users.isEmpty else { return }
            nextID += 1
            queries[nextID] = users
            send(
                String(decoding: Codec.encodeRequest(.query(users: users), id: .number(String(nextID))), as: UTF8.self))
        }

        /// What one text frame means to the machine: an update, or the reply to a query.
        private func received(_ bytes: [UInt8]) -> [WatchMachine.Action] {
            machine.answered()
            guard case .object(let fields)? = try? JSONParser.parse(bytes) else { return [] }
            guard let topic = fields["topic"]?.string, let message = fields["message"] else {
                return queryAnswered(fields)
            }
            let now = now
            if topic == Topic.brokerTopic {
                guard let heartbeat = try? Codec.decodeBrokerHeartbeat(Self.bytes(message)) else { return [] }
                onEvent(.heartbeat(brokerTime: heartbeat.time.milliseconds))
                return machine.heartbeat(heartbeat, now: now)
            } else if topic.hasPrefix(Topic.groupPrefix) {
                guard let update = try? Codec.decodeGroupUpdate(Self.bytes(message)) else { return [] }
                return machine.group(update, now: now)
            } else if topic.hasPrefix(Topic.presencePrefix) {
                guard let record = try? Codec.decodeRecord(message) else { return [] }
                return machine.record(record, now: now)
            }
            return []
        }

        /// A reply: a query's answers go to the machine (and the rest of a paged query is asked for); a resume's
        /// refusal and the ping's presence log too.
        private func queryAnswered(_ fields: [JSONKey: JSON]) -> [WatchMachine.Action] {
            guard let idText = fields["id"].flatMap({ if case .number(let n) = $0 { n } else { nil } }),
                let id = Int64(idText)
            else { return [] }
            if id == ping {
                ping = nil
                machine.logEpoch(
                    fields["log_epoch"]?.string, offset: fields["offset"]?.integer.flatMap { UInt64(exactly: $0) })
                return []
            }
            if let topics = resumes.removeValue(forKey: id) {
                // Refused (`snapshot_required`, `no_history`, or anything else): subscribed afresh instead.
                guard fields["ok"] == .bool(true) else { return machine.resumeRefused(topics, now: now) }
                machine.resumeAnswered(topics)
                return []
            }
            guard let users = queries.removeValue(forKey: id),
                case .bool(true)? = fields["ok"], let answers = try? Codec.decodeQuery(fields)
            else { return [] }
            if let next = try? Codec.decodeQueryNext(fields), next < users.count { query(Array(users[next...])) }
            return machine.queried(Array(answers.values), now: now)
        }

        private static func bytes(_ json: JSON) -> [UInt8] {
            var writer = JSONWriter()
            writer.value(json)
            return writer.bytes
        }

        /// `{"op":…,"topics":[…]}`, with `id`, `after` and `log_epoch` for a resume.
        static func request(
            _ op: String, _ topics: [Topic], id: Int64? = nil, after: UInt64? = nil, logEpoch: String? = nil
        ) -> String {
            var writer = JSONWriter()
            writer.beginObject()
            writer.key("op")
            writer.string(op)
            if let id {
                writer.key("id")
                writer.integer(id)
            }
            writer.key("topics")
            writer.beginArray()
            for topic in topics { writer.string(topic.text) }
            writer.endArray()
            if let after, let logEpoch {
                writer.key("after")
                writer.integer(after)
                writer.key("log_epoch")
                writer.string(logEpoch)
            }
            writer.endObject()
            return String(decoding: writer.bytes, as: UTF8.self)
        }

        private func disconnect() {
            connection?.outgoing.yield(nil)
            connection?.outgoing.finish()
        }

        /// Opens a connection (with a fresh token, given a provider); its opening, frames and end come back as inputs
        /// tagged with its generation.
        private func connect() async {
            if let tokenProvider, let fresh = try? await tokenProvider() { token = fresh }
            generation += 1
            let (outgoing, sender) = AsyncStream<String?>.makeStream()
            connection = (generation, sender)
            Task { [url, inputs, generation, configuration = WebSocketClient.configuration(token: token)] in
                var code: UInt16?
                do {
                    let frame = try await WebSocketClient.connect(
                        url: url, configuration: configuration, logger: WebSocketClient.quietLogger
                    ) { inbound, outbound, _ in
                        inputs.yield(.opened(generation: generation))
                        try await WebSocketPump.run(inbound: inbound, outbound: outbound, sending: outgoing) { text in
                            inputs.yield(.frame(generation: generation, bytes: Array(text.utf8)))
                        }
                    }
                    code = frame.map { UInt16(webSocketErrorCode: $0.closeCode) }
                } catch {
                    code = nil
                }
                inputs.yield(.ended(generation: generation, code: code))
            }
        }
    }
}
