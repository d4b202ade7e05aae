/// A key and its value at some revision, as etcd stores them. RollCall's keys and values are UTF-8 text (values
/// are JSON); etcd carries both as bytes.
public struct EtcdKeyValue: Sendable, Equatable {
    public var key: String
    public var value: String
    /// The revision of the key's creation, of its last change, and the number of changes since its creation.
    public var createRevision: Int64
    public var modRevision: Int64
    public var version: Int64
    /// The lease the key is attached to; 0 for none.
    public var lease: Int64

    public init(
        key: String, value: String, createRevision: Int64 = 0, modRevision: Int64 = 0, version: Int64 = 0,
        lease: Int64 = 0
    ) {
        self.key = key
        self.value = value
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.version = version
        self.lease = lease
    }
}

/// One change a watch reports.
public struct EtcdEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case put
        case delete
    }

    public var kind: Kind
    /// For a delete, only the key and `modRevision` (the revision of the deletion) are set.
    public var kv: EtcdKeyValue

    public init(kind: Kind, kv: EtcdKeyValue) {
        self.kind = kind
        self.kv = kv
    }
}

/// The keys of a range read, and the store's revision they were read at.
public struct EtcdRange: Sendable, Equatable {
    public var revision: Int64
    public var kvs: [EtcdKeyValue]
    /// Whether more keys matched than the limit let through.
    public var more: Bool
}

/// A granted lease: its id and the time to live etcd granted, in seconds.
public struct EtcdLease: Sendable, Equatable {
    public var id: Int64
    public var ttlSeconds: Int64
}

/// A condition of a transaction, on one key.
public struct EtcdCompare: Sendable, Equatable {
    public enum Target: Sendable, Equatable {
        /// Number of changes since creation; 0 when the key does not exist.
        case version(Int64)
        case createRevision(Int64)
        case modRevision(Int64)
        case value(String)
    }

    public enum Result: Sendable, Equatable {
        case equal
        case notEqual
        case greater
        case less
    }

    public var key: String
    public var result: Result
    public var target: Target

    public init(key: String, _ result: Result, _ target: Target) {
        self.key = key
        self.result = result
        self.target = target
    }

    /// The key does not exist.
    public static func absent(_ key: String) -> EtcdCompare { EtcdCompare(key: key, .equal, .version(0)) }
}

/// A write inside a transaction.
public enum EtcdOperation: Sendable, Equatable {
    case put(key: String, value: String, lease: Int64)
    /// Deletes `key`, or every key under it when `prefix`.
    case delete(key: String, prefix: Bool)

    /// The bytes of its key and value.
    public var bytes: Int {
        switch self {
        case .put(let key, let value, _): key.utf8.count + value.utf8.count
        case .delete(let key, _): key.utf8.count
        }
    }

    /// The key the operation writes (the first, for a prefix delete).
    public var key: String {
        switch self {
        case .put(let key, _, _), .delete(let key, _): key
        }
    }
}

/// What a transaction did: whether its conditions held (so the success branch ran), and the revision after it.
public struct EtcdTxnResult: Sendable, Equatable {
    public var succeeded: Bool
    public var revision: Int64
}
