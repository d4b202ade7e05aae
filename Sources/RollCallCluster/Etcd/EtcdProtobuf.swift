import Foundation

/// RollCall's etcd types to and from etcd's protobuf messages (Generated/). Keys and values are UTF-8 text to
/// RollCall (values are the broker's JSON) and bytes to etcd.
enum EtcdProtobuf {
    /// The end of the range of keys that start with `prefix`: the prefix with its last byte increased (bytes of
    /// 0xFF at the end are dropped first; a prefix of only such bytes ranges to the end of the keyspace).
    static func prefixEnd(_ prefix: String) -> Data {
        var bytes = Array(prefix.utf8)
        while let last = bytes.last {
            if last < 0xFF {
                bytes[bytes.count - 1] = last + 1
                return Data(bytes)
            }
            bytes.removeLast()
        }
        return Data([0])
    }

    static func keyValue(_ kv: Mvccpb_KeyValue) -> EtcdKeyValue {
        EtcdKeyValue(
            key: String(decoding: kv.key, as: UTF8.self), value: String(decoding: kv.value, as: UTF8.self),
            createRevision: kv.createRevision, modRevision: kv.modRevision, version: kv.version, lease: kv.lease)
    }

    static func event(_ event: Mvccpb_Event) -> EtcdEvent {
        EtcdEvent(kind: event.type == .delete ? .delete : .put, kv: keyValue(event.kv))
    }

    static func compare(_ compare: EtcdCompare) -> Etcdserverpb_Compare {
        var message = Etcdserverpb_Compare()
        message.key = Data(compare.key.utf8)
        message.result =
            switch compare.result {
            case .equal: .equal
            case .notEqual: .notEqual
            case .greater: .greater
            case .less: .less
            }
        switch compare.target {
        case .version(let version):
            message.target = .version
            message.version = version
        case .createRevision(let revision):
            message.target = .create
            message.createRevision = revision
        case .modRevision(let revision):
            message.target = .mod
            message.modRevision = revision
        case .value(let value):
            message.target = .value
            message.value = Data(value.utf8)
        }
        return message
    }

    static func put(_ key: String, _ value: String, lease: Int64) -> Etcdserverpb_PutRequest {
        var put = Etcdserverpb_PutRequest()
        put.key = Data(key.utf8)
        put.value = Data(value.utf8)
        put.lease = lease
        return put
    }

    static func delete(_ key: String, prefix: Bool) -> Etcdserverpb_DeleteRangeRequest {
        var delete = Etcdserverpb_DeleteRangeRequest()
        delete.key = Data(key.utf8)
        if prefix { delete.rangeEnd = prefixEnd(key) }
        return delete
    }

    static func operation(_ operation: EtcdOperation) -> Etcdserverpb_RequestOp {
        var message = Etcdserverpb_RequestOp()
        switch operation {
        case .put(let key, let value, let lease): message.requestPut = put(key, value, lease: lease)
        case .delete(let key, let prefix): message.requestDeleteRange = delete(key, prefix: prefix)
        }
        return message
    }
}
