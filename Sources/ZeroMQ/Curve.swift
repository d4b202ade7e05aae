import CZeroMQ

/// CurveZMQ keys (RFC 26) as libzmq makes them: a 32-byte key written as 40 Z85 characters.
public enum Curve {
    /// Whether this libzmq was built with CURVE (Debian's is, with libsodium).
    public static var isAvailable: Bool { zmq_has("curve") == 1 }

    /// A new key pair, from libzmq's random source.
    public static func keyPair() throws -> (publicKey: String, secretKey: String) {
        var publicKey = [CChar](repeating: 0, count: 41)
        var secretKey = [CChar](repeating: 0, count: 41)
        try zmqCheck("zmq_curve_keypair") { zmq_curve_keypair(&publicKey, &secretKey) }
        return (text(publicKey), text(secretKey))
    }

    /// The public key that belongs to `secretKey` (40 Z85 characters).
    public static func publicKey(ofSecret secretKey: String) throws -> String {
        var publicKey = [CChar](repeating: 0, count: 41)
        try zmqCheck("zmq_curve_public") { zmq_curve_public(&publicKey, secretKey) }
        return text(publicKey)
    }

    /// `bytes` in Z85 (ZeroMQ RFC 32), or `nil` unless their count is a multiple of 4. A ZAP request carries a
    /// client's CURVE key as 32 raw bytes; this makes it the 40 characters key files hold.
    public static func z85(_ bytes: [UInt8]) -> String? {
        guard bytes.count % 4 == 0 else { return nil }
        var encoded = [CChar](repeating: 0, count: bytes.count * 5 / 4 + 1)
        guard zmq_z85_encode(&encoded, bytes, bytes.count) != nil else { return nil }
        return text(encoded)
    }

    private static func text(_ characters: [CChar]) -> String {
        String(decoding: characters.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
