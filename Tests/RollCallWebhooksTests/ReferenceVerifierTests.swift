import Foundation
import Testing

@testable import RollCallWebhooks

/// The verifiers docs/webhooks.md shows, in Python and Node (docs/examples/), accept the signer's headers for a
/// real body, and refuse the body changed by one byte.
@Suite struct ReferenceVerifierTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The path of `tool` on the PATH, if any.
    static func which(_ tool: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(tool)" }.first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
    }

    /// Runs `tool script secret id timestamp signature` with `body` on its standard input; its exit status.
    static func run(_ tool: String, _ script: String, arguments: [String], body: [UInt8]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = [repository.appendingPathComponent(script).path] + arguments
        let input = Pipe()
        process.standardInput = input
        try process.run()
        input.fileHandleForWriting.write(Data(body))
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        return process.terminationStatus
    }

    @Test(arguments: [("python3", "docs/examples/webhook_verify.py"), ("node", "docs/examples/webhook-verify.js")])
    func documentedVerifierAcceptsTheSignersHeaders(tool: String, script: String) throws {
        guard let path = Self.which(tool) else {
            print("\(tool) is not installed: the documented verifier is not run")
            return
        }
        let secret = "whsec_" + Data((0..<32).map { UInt8($0 * 5 % 256) }).base64EncodedString()
        let signer = try StandardWebhookSigner(secret: secret)
        let body = WebhookPayload.presenceChanged([entry(41), entry(42)])
        let timestamp = Int64(Date().timeIntervalSince1970)
        let signature = signer.signature(id: "msg_41_42", timestamp: timestamp, body: body)
        let arguments = [secret, "msg_41_42", String(timestamp), signature]
        #expect(try Self.run(path, script, arguments: arguments, body: body) == 0)
        #expect(try Self.run(path, script, arguments: arguments, body: body.dropLast() + [UInt8(ascii: " ")]) == 1)
    }
}
