import Foundation
import RollCallClient
import RollCallSecurity
import ZeroMQ

/// CURVE for a benchmark run: a broker key pair and one operator key for every client, in files of a temporary
/// directory that `serve` reads (`--curve-secret-key-file`, `--authorized-keys`).
public struct CurveSetup: Sendable {
    public let brokerArguments: [String]
    public let credentials: CurveCredentials

    /// Makes the keys and writes the files under a new temporary directory.
    public static func make() throws -> CurveSetup {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "rollcall-bench-curve-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let server = try Curve.keyPair()
        let client = try Curve.keyPair()
        let secretFile = directory.appendingPathComponent("broker.key").path
        try CertificateFile.create(
            Certificate(publicKey: CurveKey(server.publicKey)!, secretKey: CurveKey(server.secretKey)!), at: secretFile)
        let table = directory.appendingPathComponent("authorized_keys").path
        try "\(client.publicKey) operator\n".write(toFile: table, atomically: true, encoding: .utf8)
        return CurveSetup(
            brokerArguments: ["--curve-secret-key-file", secretFile, "--authorized-keys", table],
            credentials: CurveCredentials(
                serverKey: server.publicKey, publicKey: client.publicKey, secretKey: client.secretKey))
    }
}
