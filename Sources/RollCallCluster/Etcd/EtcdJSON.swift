import Foundation

/// The gateway's JSON, both ways: int64s travel as strings, bytes as base64, and fields at their zero value are
/// left out (a put event has no `type`, a failed transaction no `succeeded`).
enum EtcdJSON {
    static func encode(_ object: [String: Any]) -> Data {
        // Only dictionaries of strings, booleans, arrays and dictionaries are passed: serialization cannot fail.
        (try? JSONSerialization.data(withJSONObject: object)) ?? Data("{}".utf8)
    }

    static func decode(_ data: Data) throws -> [String: Any] {
        guard let object = try? JSONSerialization.jsonObject(with: data), let dictionary = object as? [String: Any]
        else {
            throw EtcdError.protocolError("not a JSON object: \(String(decoding: data.prefix(200), as: UTF8.self))")
        }
        return dictionary
    }

    static func base64(_ text: String) -> String { Data(text.utf8).base64EncodedString() }

    /// The end of the range of keys that start with `prefix`: the prefix with its last byte increased.
    static func prefixEnd(_ prefix: String) -> String {
        var bytes = Array(prefix.utf8)
        while let last = bytes.last {
            if last < 0xFF {
                bytes[bytes.count - 1] = last + 1
                return Data(bytes).base64EncodedString()
            }
            bytes.removeLast()
        }
        // Every byte 0xFF: to the end of the keyspace.
        return Data([0]).base64EncodedString()
    }

    static func int64(_ value: Any?) -> Int64 {
        switch value {
        case let text as String: Int64(text) ?? 0
        case let number as NSNumber: number.int64Value
        default: 0
        }
    }

    static func text(base64 value: Any?) -> String {
        guard let text = value as? String, let data = Data(base64Encoded: text) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    static func keyValue(_ value: Any?) -> EtcdKeyValue {
        let kv = value as? [String: Any] ?? [:]
        return EtcdKeyValue(
            key: text(base64: kv["key"]), value: text(base64: kv["value"]),
            createRevision: int64(kv["create_revision"]), modRevision: int64(kv["mod_revision"]),
            version: int64(kv["version"]), lease: int64(kv["lease"]))
    }

    static func revision(_ reply: [String: Any]) -> Int64 {
        int64((reply["header"] as? [String: Any])?["revision"])
    }

    static func compare(_ compare: EtcdCompare) -> [String: Any] {
        var object: [String: Any] = ["key": base64(compare.key), "result": compare.result.rawValue]
        switch compare.target {
        case .version(let version):
            object["target"] = "VERSION"
            object["version"] = String(version)
        case .createRevision(let revision):
            object["target"] = "CREATE"
            object["create_revision"] = String(revision)
        case .modRevision(let revision):
            object["target"] = "MOD"
            object["mod_revision"] = String(revision)
        case .value(let value):
            object["target"] = "VALUE"
            object["value"] = base64(value)
        }
        return object
    }

    static func operation(_ operation: EtcdOperation) -> [String: Any] {
        switch operation {
        case .put(let key, let value, let lease):
            var put: [String: Any] = ["key": base64(key), "value": base64(value)]
            if lease != 0 { put["lease"] = String(lease) }
            return ["request_put": put]
        case .delete(let key, let prefix):
            var delete: [String: Any] = ["key": base64(key)]
            if prefix { delete["range_end"] = prefixEnd(key) }
            return ["request_delete_range": delete]
        }
    }
}
