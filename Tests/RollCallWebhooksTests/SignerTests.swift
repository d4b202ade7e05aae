import Crypto
import Foundation
import RollCallCore
import RollCallWire
import Testing

@testable import RollCallWebhooks

/// Standard Webhooks signatures, and the bodies they sign.
@Suite struct SignerTests {
    /// The specification's reference libraries' test vector (their `TestWebhookSign`): this secret, id, timestamp
    /// and payload sign to exactly this value.
    @Test func matchesTheSpecificationsTestVector() throws {
        let signer = try StandardWebhookSigner(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let signature = signer.signature(
            id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: Array(#"{"test": 2432232314}"#.utf8))
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    /// A verifier written apart from the signer (the receiver's steps: decode the secret, HMAC "id.timestamp.body",
    /// compare with each `v1,` entry of the header) accepts the headers, and refuses another body or id.
    @Test func headersVerifyIndependently() throws {
        let key = Data((0..<32).map { UInt8($0 * 7 % 256) })
        let secret = "whsec_" + key.base64EncodedString()
        let signer = try StandardWebhookSigner(secret: secret + "\n")
        let body = WebhookPayload.presenceChanged([entry(1), entry(2)])
        let headers = Dictionary(
            uniqueKeysWithValues: signer.headers(id: "msg_1_2", timestamp: 1_700_000_000, body: body))
        #expect(headers["webhook-id"] == "msg_1_2")
        #expect(headers["webhook-timestamp"] == "1700000000")
        #expect(Self.verify(secret: secret, headers: headers, body: body))
        #expect(!Self.verify(secret: secret, headers: headers, body: body + Array(" ".utf8)))
        var otherID = headers
        otherID["webhook-id"] = "msg_1_3"
        #expect(!Self.verify(secret: secret, headers: otherID, body: body))
    }

    /// A receiver's verification, from the specification's steps.
    static func verify(secret: String, headers: [String: String], body: [UInt8]) -> Bool {
        guard secret.hasPrefix("whsec_"), let key = Data(base64Encoded: String(secret.dropFirst(6))),
            let id = headers["webhook-id"], let timestamp = headers["webhook-timestamp"],
            let signatures = headers["webhook-signature"]
        else { return false }
        let signed = Data("\(id).\(timestamp).".utf8) + Data(body)
        let expected = Data(HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: key)))
        return signatures.split(separator: " ").contains { entry in
            entry.hasPrefix("v1,") && Data(base64Encoded: String(entry.dropFirst(3))) == expected
        }
    }

    /// A secret without `whsec_`, without base64, or with a key shorter than 24 bytes is refused.
    @Test(arguments: [
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", StandardWebhookSigner.SecretError.missingPrefix),
        ("whsec_", .notBase64), ("whsec_not base64!", .notBase64), ("whsec_c2hvcnQ=", .tooShort(bytes: 5)),
    ])
    func refusesBadSecrets(secret: String, error: StandardWebhookSigner.SecretError) {
        #expect(throws: error) { try StandardWebhookSigner(secret: secret) }
    }

    /// The body holds each entry's offset, user and record, the record byte for byte as subscribers receive it,
    /// and the newest entry's broker time as its timestamp.
    @Test func bodyCarriesTheRecordsAsPublished() throws {
        let entries = [entry(7), entry(8)]
        let body = WebhookPayload.presenceChanged(entries)
        let text = String(decoding: body, as: UTF8.self)
        #expect(text.hasPrefix(#"{"type":"presence.changed","timestamp":\#(entries[1].time.milliseconds),"data":"#))
        for entry in entries {
            let record = String(decoding: Codec.encodeRecord(entry.record), as: UTF8.self)
            #expect(
                text.contains(
                    #"{"offset":\#(entry.offset),"user":"\#(entry.record.user.rawValue)","record":\#(record)}"#))
        }
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        let events = try #require((parsed["data"] as? [String: Any])?["events"] as? [[String: Any]])
        #expect(events.compactMap { $0["offset"] as? Int } == [7, 8])
    }
}
