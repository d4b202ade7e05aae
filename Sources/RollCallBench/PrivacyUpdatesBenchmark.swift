import Foundation
import RollCallClient
import RollCallSecurity
import RollCallTestSupport
import ZeroMQ

/// The privacy fan-out on the update socket (docs/privacy.md, "ZeroMQ subscriptions"): one user (u0) followed by
/// `viewers` of its contacts, each over ZeroMQ with its own CURVE `user` key, in three settings on one broker, in
/// turn: u0 public; u0 contacts-only and followed by contacts alone (still once for everyone); u0 contacts-only with
/// `strangers` keys following too (a copy per contact, and nothing for the strangers).
extension PresenceBenchmarks {
    public func privacyOverUpdates(viewers: Int, strangers: Int, changes: Int) throws -> [BenchRow] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "rollcall-privacy-updates-\(ProcessInfo.processInfo.processIdentifier)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try Curve.keyPair()
        let serverFile = directory.appendingPathComponent("broker.key").path
        try CertificateFile.create(
            Certificate(publicKey: CurveKey(server.publicKey)!, secretKey: CurveKey(server.secretKey)!), at: serverFile)
        let names = ["op"] + (1...viewers).map { "u\($0)" } + (1...max(1, strangers)).map { "s\($0)" }
        var credentials: [String: CurveCredentials] = [:]
        var table = ""
        for name in names {
            let pair = try Curve.keyPairForKeyFiles()
            credentials[name] = CurveCredentials(
                serverKey: server.publicKey, publicKey: pair.publicKey, secretKey: pair.secretKey)
            table += "\(pair.publicKey) \(name == "op" ? "operator" : "user \(name)")\n"
        }
        let tableFile = directory.appendingPathComponent("authorized_keys").path
        try table.write(toFile: tableFile, atomically: true, encoding: .utf8)
        let contactsFile = directory.appendingPathComponent("contacts").path
        try "u0: \((1...viewers).map { "u\($0)" }.joined(separator: ", "))\n".write(
            toFile: contactsFile, atomically: true, encoding: .utf8)
        let broker = try BrokerProcess(
            executable: executable,
            arguments: brokerArguments + [
                "--curve-secret-key-file", serverFile, "--authorized-keys", tableFile, "--contacts-file", contactsFile,
                "--max-contacts", "\(max(viewers, 5_000))",
            ])
        defer { broker.stop() }
        let pipeline = try RequestPipeline(endpoint: broker.command, credentials: credentials["op"])
        let session = try openSessions(pipeline, users: ["u0"])[0]
        let context = try Context()
        func follower(_ name: String) throws -> Socket {
            let socket = try Socket(context, .sub)
            try credentials[name]!.apply(to: socket)
            try socket.set(.linger(milliseconds: 0))
            try socket.set(.subscribe(Array("presence/u0/".utf8)))
            try socket.connect(broker.update)
            return socket
        }
        let contacts = try (1...viewers).map { try follower("u\($0)") }
        log("privacy over ZeroMQ: \(viewers) contacts' keys follow u0")
        try FanOut.awaitLastValues(contacts)

        var rows: [BenchRow] = []
        func measure(_ id: String, _ scenario: String) throws {
            let measured = try FanOut.time(contacts, pipeline: pipeline, session: session, changes: changes)
            var figures = measured.toAll.figures()
            figures.merge(measured.perDelivery.figures(prefix: "delivery_"), uniquingKeysWith: { $1 })
            figures["missed"] = Double(measured.missed)
            rows.append(
                BenchRow(
                    id: id, scenario: scenario, figures: figures,
                    summary: "to the last viewer \(measured.toAll.summary); \(measured.missed) missed",
                    histogram: measured.toAll.distribution))
        }
        try measure(
            "P4.updates-public-\(viewers)",
            "change of a public user → the last of \(viewers) `user` keys following it on the update socket "
                + "(once for everyone)")
        try pipeline.send(Array(#"{"op":"privacy","user":"u0","visibility":"contacts"}"#.utf8))
        try pipeline.drain()
        try measure(
            "P4.updates-contacts-\(viewers)",
            "the same, u0 `visibility: contacts`, followed by its contacts alone (once for everyone)")
        let outsiders = try (1...max(1, strangers)).map { try follower("s\($0)") }
        try FanOut.awaitLastValues(outsiders)
        try measure(
            "P4.updates-copies-\(viewers)",
            "the same, with \(outsiders.count) strangers' keys following u0 too (a copy per contact)")
        var leaked = 0
        for socket in outsiders {
            while let (frames, _) = try socket.receiveMessage(maxFrames: 2) {
                if frames.count == 2, contains(frames[1].bytes, Array(#""text":"b"#.utf8)) { leaked += 1 }
            }
        }
        rows[rows.count - 1].figures["leaked"] = Double(leaked)
        rows[rows.count - 1].summary += "; \(leaked) reached the \(outsiders.count) strangers"
        return rows
    }
}
