import ArgumentParser
import RollCallSecurity
import ZeroMQ

struct Keygen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a new CURVE key pair to PATH (mode 0600, czmq's certificate format); print its public key.",
        discussion: "An existing file is never overwritten. Give the public key to whoever must trust this key.")

    @Argument(help: "Where to write the secret certificate.") var path: String

    func run() throws {
        guard Curve.isAvailable else { throw fail(KeygenError("this libzmq was built without CURVE")) }
        do {
            let pair = try Curve.keyPairForKeyFiles()
            guard let publicKey = CurveKey(pair.publicKey), let secretKey = CurveKey(pair.secretKey) else {
                throw KeygenError("libzmq made a key that is not 40 Z85 characters")
            }
            try CertificateFile.create(Certificate(publicKey: publicKey, secretKey: secretKey), at: path)
            emit(publicKey.z85)
        } catch {
            throw fail(error)
        }
    }
}

struct KeygenError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
