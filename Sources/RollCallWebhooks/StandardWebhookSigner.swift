import Crypto
import Foundation

/// Signs a webhook as the Standard Webhooks specification says (symmetric, `v1`): the HMAC-SHA256 of
/// `"<webhook-id>.<webhook-timestamp>.<body>"` with the secret's key, in base64, sent as
/// `webhook-signature: v1,<signature>`. Any Standard Webhooks verifier checks it with the same secret.
public struct StandardWebhookSigner: Sendable {
    /// Why a secret cannot be used.
    public enum SecretError: Error, Equatable, Sendable, CustomStringConvertible {
        case missingPrefix
        case notBase64
        case tooShort(bytes: Int)

        public var description: String {
            switch self {
            case .missingPrefix: "is not a whsec_ secret (whsec_ followed by base64)"
            case .notBase64: "has no valid base64 after whsec_"
            case .tooShort(let bytes):
                "holds a key of \(bytes) bytes: at least \(StandardWebhookSigner.minimumKeyBytes) are needed"
            }
        }
    }

    /// The specification asks for keys of 24 to 64 bytes; shorter ones are refused.
    public static let minimumKeyBytes = 24

    private let key: SymmetricKey

    /// A signer for `secret`, `whsec_` followed by the key in base64 (surrounding white space ignored, so that a
    /// file ending in a newline works).
    public init(secret: String) throws(SecretError) {
        let text = secret.trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix("whsec_") else { throw .missingPrefix }
        guard let bytes = Data(base64Encoded: String(text.dropFirst("whsec_".count))), !bytes.isEmpty else {
            throw .notBase64
        }
        guard bytes.count >= Self.minimumKeyBytes else { throw .tooShort(bytes: bytes.count) }
        key = SymmetricKey(data: bytes)
    }

    /// The value of `webhook-signature` for one delivery attempt: `v1,<base64>`.
    public func signature(id: String, timestamp: Int64, body: some DataProtocol) -> String {
        var hmac = HMAC<SHA256>(key: key)
        hmac.update(data: Array("\(id).\(timestamp).".utf8))
        hmac.update(data: body)
        return "v1," + Data(hmac.finalize()).base64EncodedString()
    }

    /// The three headers of one attempt: `webhook-id`, `webhook-timestamp` (Unix seconds) and `webhook-signature`.
    public func headers(id: String, timestamp: Int64, body: some DataProtocol) -> [(name: String, value: String)] {
        [
            ("webhook-id", id), ("webhook-timestamp", String(timestamp)),
            ("webhook-signature", signature(id: id, timestamp: timestamp, body: body)),
        ]
    }
}
