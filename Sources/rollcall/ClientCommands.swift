import ArgumentParser
import Foundation
import RollCallClient
import RollCallCore
import RollCallWire
import Synchronization

/// Parses user ids from the command line, with the protocol's rules.
func userIDs(_ texts: [String]) throws -> [UserID] {
    try texts.map { text in
        guard let user = UserID(validating: text) else {
            throw ValidationError("invalid user id '\(text)': 1 to 128 bytes of A-Z a-z 0-9 . _ @ + -")
        }
        return user
    }
}

extension Status: ExpressibleByArgument {}

struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print every update of USERs (or of everyone with --all) as one JSON line, until interrupted.")

    @OptionGroup var endpoints: ClientEndpoints
    @OptionGroup var keys: ClientKeys
    @Flag(help: "Follow every user (no current state is printed for them first).") var all = false
    @Option(help: "Follow over the broker's WebSocket endpoint instead, without libzmq: ws://HOST:PORT/v1/ws.")
    var ws: String?
    @Option(help: "The token (JWT) for --ws, if the broker checks tokens.") var token: String?
    @Argument(help: "The users to follow.") var users: [String] = []

    func validate() throws {
        guard all || !users.isEmpty else { throw ValidationError("name at least one USER, or --all") }
    }

    func run() async throws {
        let users = try userIDs(self.users)
        if let ws {
            try await watchOverWebSocket(ws, token: token, users: users, all: all)
            return
        }
        let endpoint = try endpoints.update()
        let command = try endpoints.command()
        let all = self.all
        do {
            try await runUntilSignalled { stop in
                let watcher = try PresenceWatcher(
                    endpoint: endpoint, commandEndpoint: command, credentials: try keys.credentials(),
                    viewer: try keys.viewer())
                let print: @Sendable (PresenceRecord) -> Void = { record in
                    emit(String(decoding: Codec.encodeRecord(record), as: UTF8.self))
                }
                _ = watcher.observeBroker { event in note(describe(event)) }
                if all { _ = watcher.observeAll(print) }
                for user in users { _ = watcher.observe(user, print) }
                while !stop.isSet { Thread.sleep(forTimeInterval: 0.1) }
                watcher.close()
            }
        } catch {
            throw fail(error)
        }
    }
}

/// What `watch` says on stderr about the broker.
func describe(_ event: PresenceWatcher.BrokerEvent) -> String {
    switch event {
    case .connected(let epoch): "broker connected (epoch \(epoch))"
    case .lost: "broker connection lost: presence may be out of date"
    case .recovered: "broker connection back"
    case .restarted(let epoch): "broker restarted (epoch \(epoch)): current state follows"
    case .failed(let reason): "watcher failed: \(reason)"
    case .fellBehind: "updates may have been missed: current state follows"
    }
}

struct Online: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Hold a session open for USER, heartbeating, until interrupted; then say bye.")

    @OptionGroup var endpoints: ClientEndpoints
    @OptionGroup var keys: ClientKeys
    @Option(help: "online, away, busy or offline.") var status: Status = .online
    @Option(help: "A custom status line, up to 256 characters.") var text: String?
    @Option(help: "A device name for the session.") var device: String?
    @Option(help: "The session TTL to ask for, ms (the broker's default if omitted).") var ttlMs: Int64?
    @Option(
        help: "Hold the session over the broker's WebSocket endpoint instead, without libzmq: ws://HOST:PORT/v1/ws.")
    var ws: String?
    @Option(help: "The token (JWT) for --ws, if the broker checks tokens.") var token: String?
    @Flag(
        help:
            "Ask the broker to keep the session alive by its connection (\"keepalive\":\"connection\"): no heartbeats.")
    var keepaliveConnection = false
    @Argument(help: "The user to be.") var user: String

    func run() async throws {
        let user = try userIDs([self.user])[0]
        let hello = PresenceCore.Hello(
            user: user, device: device, status: status, text: text, ttlMilliseconds: ttlMs,
            keepAlive: keepaliveConnection ? .connection : .requests)
        if let ws {
            try await onlineOverWebSocket(ws, token: token, hello: hello)
            return
        }
        let endpoints = try endpoints.commands()
        do {
            try await runUntilSignalled { stop in
                // The state callback names the endpoint after a fail-over; it runs on the session's thread, once
                // the session exists.
                let current = Mutex<PresenceSession?>(nil)
                let session = try PresenceSession(
                    endpoints: endpoints, hello: hello, credentials: try keys.credentials(),
                    onState: { state in
                        noteState(state)
                        guard case .live = state, endpoints.count > 1, let session = current.withLock({ $0 })
                        else { return }
                        emit("\(user) is on \(session.endpoint) (session \(session.session))")
                    })
                current.withLock { $0 = session }
                emit(
                    "\(user) is \(hello.status)\(endpoints.count > 1 ? " on \(session.endpoint)" : "") "
                        + "(session \(session.granted.session), heartbeat "
                        + "\(session.granted.heartbeatMilliseconds) ms, ttl \(session.granted.ttlMilliseconds) ms)")
                while !stop.isSet { Thread.sleep(forTimeInterval: 0.1) }
                session.close()
            }
        } catch {
            throw fail(error)
        }
    }
}

/// What `online` says on stderr when its session's state changes, over either transport.
@Sendable func noteState(_ state: SessionMachine.Phase) {
    switch state {
    case .live(let session): note("session \(session) live")
    case .reconnecting(let attempt): note("broker not answering; retrying (attempt \(attempt))")
    case .closed: break
    }
}

struct Query: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the current record of each USER as a JSON line.")

    @OptionGroup var endpoints: ClientEndpoints
    @OptionGroup var keys: ClientKeys
    @Argument(help: "The users to read (at most 1000).") var users: [String]

    func run() async throws {
        let users = try userIDs(self.users)
        do {
            let records = try CommandClient(endpoints: try endpoints.commands(), credentials: try keys.credentials())
                .query(users)
            for user in users {
                guard let record = records[user] else { continue }
                emit(String(decoding: Codec.encodeRecord(record), as: UTF8.self))
            }
        } catch {
            throw fail(error)
        }
    }
}

struct Ping: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Ask the broker who it is; exit non-zero if it does not answer.")

    @OptionGroup var endpoints: ClientEndpoints
    @OptionGroup var keys: ClientKeys

    func run() async throws {
        do {
            let info = try CommandClient(
                endpoints: try endpoints.commands(), timeoutMilliseconds: 2_000, credentials: try keys.credentials()
            ).ping()
            emit(String(decoding: Codec.encodeBrokerInfo(info), as: UTF8.self))
        } catch {
            throw fail(error)
        }
    }
}

struct Advance: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Move a test-mode broker's clock forward by MS milliseconds; print the new broker time.",
        discussion: "Only a broker started with `rollcall serve --test-mode` accepts it (others answer unknown_op).")

    @OptionGroup var endpoints: ClientEndpoints
    @OptionGroup var keys: ClientKeys
    @Argument(help: "Milliseconds, 0 to 31536000000.") var ms: Int64

    func run() async throws {
        do {
            let fields = try CommandClient(endpoints: try endpoints.commands(), credentials: try keys.credentials())
                .call(.advance(milliseconds: ms))
            emit(fields["time"]?.integer.map(String.init) ?? "")
        } catch {
            throw fail(error)
        }
    }
}
