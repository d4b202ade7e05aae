import Crypto
import Foundation
import RollCallTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The privacy figures of issue 23 (docs/privacy.md): a contacts file of `users` × `contacts` edges loaded by a
/// real broker (memory per edge, load time), then, on that same broker, one user with `visibility: contacts` whose
/// contacts watch it over WebSocket with their own `user` tokens (change → every permitted viewer).
extension PresenceBenchmarks {
    public struct PrivacySizes: Sendable {
        public var users: Int
        public var contacts: Int
        public var viewers: Int
        public var changes: Int

        public init(users: Int, contacts: Int, viewers: Int, changes: Int) {
            self.users = users
            self.contacts = contacts
            self.viewers = viewers
            self.changes = changes
        }
    }

    /// P1 (memory per edge), P2 (load time) and P3 (change → every permitted viewer).
    public func privacy(_ sizes: PrivacySizes) throws -> [BenchRow] {
        guard sizes.contacts < sizes.users else { throw BenchError("--privacy-contacts must be below --privacy-users") }
        let viewers = min(sizes.viewers, sizes.contacts)
        let strangers = min(10, sizes.users - sizes.contacts - 1)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "rollcall-privacy-\(ProcessInfo.processInfo.processIdentifier)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let secret = directory.appendingPathComponent("jwt.key").path
        let signing = "rollcall-bench-privacy-secret-of-more-than-32-bytes"
        try Data(signing.utf8).write(to: URL(fileURLWithPath: secret))
        let empty = directory.appendingPathComponent("empty.contacts").path
        try Data().write(to: URL(fileURLWithPath: empty))
        let file = directory.appendingPathComponent("graph.contacts").path
        log("privacy: writing \(n(Double(sizes.users))) users × \(sizes.contacts) contacts")
        let edges = try ContactsGraph(users: sizes.users, contacts: sizes.contacts).write(to: file)
        let bytes = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.doubleValue ?? 0

        // Both brokers alike (tokens, WebSocket endpoint), only the file differs; the file may take minutes.
        let arguments = ["--jwt-key-file", secret, "--max-contacts", "\(max(sizes.contacts, 5_000))"]
        let tokens = HS256Tokens(secret: signing)
        let probe = tokens.token(user: "probe")
        log("privacy: a broker with an empty contacts file")
        var started = ContinuousClock.now
        let (base, _) = try webSocketBroker(
            arguments + ["--contacts-file", empty], startTimeout: 600, token: probe)
        let baseStart = (ContinuousClock.now - started).seconds
        Thread.sleep(forTimeInterval: 1)
        let rssBase = base.residentBytes()
        base.stop()

        log("privacy: a broker with \(n(Double(edges))) edges (\(n(bytes / 1_048_576)) MiB file)")
        started = ContinuousClock.now
        let (broker, port) = try webSocketBroker(
            arguments + ["--contacts-file", file], startTimeout: 3_600, token: probe)
        defer { broker.stop() }
        let loadedStart = (ContinuousClock.now - started).seconds
        Thread.sleep(forTimeInterval: 1)
        let rssLoaded = broker.residentBytes()
        let perEdge = Double(rssLoaded - rssBase) / Double(edges)
        let readMs = Self.loggedMilliseconds(broker.startLog, message: "contacts file read")
        let loadSeconds = loadedStart - baseStart

        var rows = [
            BenchRow(
                id: "P1.contacts-memory",
                scenario: "\(n(Double(sizes.users))) users × \(sizes.contacts) contacts (\(n(Double(edges))) edges): "
                    + "RSS with the file minus RSS with an empty file, per edge",
                figures: [
                    "bytes_per_edge": perEdge, "edges": Double(edges), "rss_base_bytes": Double(rssBase),
                    "rss_loaded_bytes": Double(rssLoaded), "file_bytes": bytes,
                ],
                summary: "**\(f(perEdge, 1)) bytes per edge** (RSS \(n(Double(rssBase) / 1_048_576)) → "
                    + "\(n(Double(rssLoaded) / 1_048_576)) MiB; file \(n(bytes / 1_048_576)) MiB)"),
            BenchRow(
                id: "P2.contacts-load",
                scenario: "load of the contacts file at start: start to ready minus the same with an empty file "
                    + "(read and applied); read and parsed alone as the broker logs it (`contacts file read`, ms)",
                figures: [
                    "load_seconds": loadSeconds, "read_ms": readMs ?? -1, "start_seconds": loadedStart,
                    "empty_start_seconds": baseStart,
                ],
                summary: "**\(f(loadSeconds, 2)) s** to read and apply (start to ready \(f(loadedStart, 2)) s against "
                    + "\(f(baseStart, 2)) s); read and parsed \(readMs.map { f($0 / 1_000, 2) + " s" } ?? "not logged")"
            ),
        ]

        // P3: the star (u0) hides from everyone but its contacts, u1...; `viewers` of them watch it, each with its
        // own `user` token, and a few users outside its contacts (strangers) watch it too: they must get nothing.
        let pipeline = try RequestPipeline(endpoint: broker.command)
        let session = try openSessions(pipeline, users: [ContactsGraph.user(0)])[0]
        pipeline.collected = []
        try pipeline.send(Array(#"{"op":"privacy","user":"\#(ContactsGraph.user(0))","visibility":"contacts"}"#.utf8))
        try pipeline.drain()
        guard let reply = pipeline.collected?.first, contains(reply, Array(#""ok":true"#.utf8)) else {
            throw BenchError("privacy refused: \(String(decoding: pipeline.collected?.first ?? [], as: UTF8.self))")
        }
        pipeline.collected = nil
        func watcher(_ index: Int) throws -> BenchWebSocket {
            let ws = try BenchWebSocket(port: port, token: tokens.token(user: ContactsGraph.user(index)))
            try ws.send(#"{"op":"subscribe","topics":["presence/\#(ContactsGraph.user(0))/"]}"#)
            return ws
        }
        log("privacy: \(viewers) contacts and \(strangers) strangers watch \(ContactsGraph.user(0)) over WebSocket")
        let sockets = try (1...viewers).map(watcher)
        let outsiders = try (0..<strangers).map { try watcher(sizes.contacts + 1 + $0) }
        for ws in sockets + outsiders {
            guard try !ws.receive(count: 1, timeout: 10).isEmpty else { throw BenchError("no subscribe reply") }
        }
        Thread.sleep(forTimeInterval: 0.3)
        for ws in sockets + outsiders { _ = try ws.receive(count: 1_000, timeout: 0) }
        log("privacy: \(sizes.changes) changes to \(viewers) permitted viewers")
        let measured = try fanOut(sockets, pipeline: pipeline, session: session, changes: sizes.changes)
        Thread.sleep(forTimeInterval: 0.2)
        var leaked = 0
        for ws in outsiders {
            leaked += try ws.receive(count: 100_000, timeout: 0).filter { contains($0, Array(#""text":"b"#.utf8)) }
                .count
        }
        for ws in sockets + outsiders { ws.close() }
        var figures = measured.toAll.figures()
        figures.merge(measured.perDelivery.figures(prefix: "delivery_"), uniquingKeysWith: { $1 })
        figures["missed"] = Double(measured.missed)
        figures["leaked"] = Double(leaked)
        rows.append(
            BenchRow(
                id: "P3.privacy-fanout-\(viewers)",
                scenario: "change of a `visibility: contacts` user → the last of its \(viewers) contacts watching over "
                    + "WebSocket with `user` tokens (\(sizes.changes) changes, \(n(Double(edges))) edges loaded)",
                figures: figures,
                summary: "to the last viewer \(measured.toAll.summary); per delivery p50/p99 "
                    + "\(f(measured.perDelivery.milliseconds(at: 50) * 1_000, 0))/"
                    + "\(f(measured.perDelivery.milliseconds(at: 99) * 1_000, 0)) µs; \(measured.missed) missed, "
                    + "\(leaked) reached the \(strangers) strangers",
                histogram: measured.toAll.distribution))
        return rows
    }

    /// `ms=` of the log line `message` in a broker's start-up log.
    static func loggedMilliseconds(_ log: String, message: String) -> Double? {
        guard let line = log.split(separator: "\n").first(where: { $0.contains(message) }),
            let range = line.range(of: #"ms=[0-9]+"#, options: .regularExpression)
        else { return nil }
        return Double(line[range].dropFirst(3))
    }
}

/// The contacts file of the privacy scenario: user i (`u<i>`) shares with the `contacts` users after it, wrapping
/// around (`u<i+1>` … `u<i+contacts>` modulo `users`), so every user has exactly `contacts` distinct contacts, none
/// itself, and is the contact of exactly `contacts` users.
public struct ContactsGraph: Sendable {
    public let users: Int
    public let contacts: Int

    public init(users: Int, contacts: Int) {
        self.users = users
        self.contacts = contacts
    }

    public static func user(_ index: Int) -> String { "u\(index)" }

    /// Line `index` of the file, with its newline.
    public func line(_ index: Int) -> String {
        "\(Self.user(index)): " + (1..<(contacts + 1)).map { Self.user((index + $0) % users) }.joined(separator: ", ")
            + "\n"
    }

    /// Writes the file in chunks; the number of edges.
    @discardableResult
    public func write(to path: String) throws -> Int {
        guard FileManager.default.createFile(atPath: path, contents: nil),
            let handle = FileHandle(forWritingAtPath: path)
        else { throw BenchError("cannot write \(path)") }
        defer { try? handle.close() }
        var chunk = ""
        for index in 0..<users {
            chunk += line(index)
            if chunk.utf8.count > 1 << 20 {
                try handle.write(contentsOf: Data(chunk.utf8))
                chunk = ""
            }
        }
        try handle.write(contentsOf: Data(chunk.utf8))
        return users * contacts
    }
}

/// HS256 tokens for the broker's `--jwt-key-file` secret: `{"sub": user, "role": "user"}`, valid for an hour.
struct HS256Tokens {
    let key: SymmetricKey

    init(secret: String) { key = SymmetricKey(data: Data(secret.utf8)) }

    func token(user: String) -> String {
        let now = Int(Date().timeIntervalSince1970)
        let input =
            Self.base64URL(Data(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "."
            + Self.base64URL(Data(#"{"sub":"\#(user)","role":"user","iat":\#(now),"exp":\#(now + 3_600)}"#.utf8))
        let signature = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: key)
        return input + "." + Self.base64URL(Data(signature))
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
