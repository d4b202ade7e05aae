import RollCallCluster

/// A node of a cluster (`--cluster`, `--node-id`, `--node-lease-ms`; docs/cluster.md): several brokers that share
/// presence through etcd, so that clients and subscribers may use any node and a node's death costs no one their
/// presence.
public struct ClusterSettings: Sendable {
    /// etcd's members, any of which the node may talk to.
    public var endpoints: [EtcdEndpoint]
    /// This node's name, unique in the cluster. Range: 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
    public var nodeID: String
    /// The node's lease: how long after its last renewal a lost node's sessions end everywhere (reason
    /// `node_lost`). It is renewed every third of it; a node whose last answered renewal was sent two thirds of it
    /// ago serves nothing more on its sessions (docs/cluster.md, "Honest under partition"). Range: 2_000...3_600_000.
    public var leaseMilliseconds: Int64 = 5_000
    /// How long one etcd call may take on one member before the node tries the next. Range: 100 ms to a third of
    /// the lease.
    public var requestTimeoutMilliseconds: Int64 = 500
    /// Where the cluster's keys live in etcd: several clusters may share one etcd under different prefixes.
    public var prefix = "/rollcall/v1/"

    /// A node's lease when none is given (`--node-lease-ms`).
    public static let defaultLeaseMilliseconds: Int64 = 5_000

    public init(endpoints: [EtcdEndpoint], nodeID: String, leaseMilliseconds: Int64 = defaultLeaseMilliseconds) {
        self.endpoints = endpoints
        self.nodeID = nodeID
        self.leaseMilliseconds = leaseMilliseconds
    }

    /// Whether `id` may name a node: 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
    public static func isValidNodeID(_ id: String) -> Bool { ClusterKeys.isValidNodeID(id) }

    /// The settings as `rollcall serve` takes them: `etcd://HOST:PORT[,HOST:PORT...]`, a node id and a lease.
    public init(
        cluster: String, nodeID: String, leaseMilliseconds: Int64 = defaultLeaseMilliseconds
    ) throws(ConfigurationError) {
        guard let endpoints = EtcdEndpoint.list(cluster) else {
            throw ConfigurationError("--cluster", "must be etcd://HOST:PORT[,HOST:PORT...], not '\(cluster)'")
        }
        self.init(endpoints: endpoints, nodeID: nodeID, leaseMilliseconds: leaseMilliseconds)
    }
}

extension BrokerConfiguration.Range {
    public static let nodeLeaseMilliseconds: ClosedRange<Int64> = 2_000...3_600_000
}

extension BrokerConfiguration {
    func validateCluster() throws(ConfigurationError) {
        guard let cluster else { return }
        guard !cluster.endpoints.isEmpty else {
            throw ConfigurationError("--cluster", "must name at least one etcd member: etcd://HOST:PORT[,HOST:PORT...]")
        }
        guard ClusterKeys.isValidNodeID(cluster.nodeID) else {
            throw ConfigurationError(
                "--node-id", "must be 1 to 64 characters of A-Z a-z 0-9 . _ -, not '\(cluster.nodeID)'")
        }
        try Self.check("--node-lease-ms", cluster.leaseMilliseconds, in: Range.nodeLeaseMilliseconds)
        guard cluster.requestTimeoutMilliseconds >= 100,
            cluster.requestTimeoutMilliseconds * 3 <= cluster.leaseMilliseconds
        else {
            throw ConfigurationError(
                "--cluster",
                "request timeout must be from 100 ms to a third of the lease, not \(cluster.requestTimeoutMilliseconds)"
            )
        }
        if testMode {
            throw ConfigurationError(
                "--test-mode", "moves a clock that etcd's leases do not follow: it excludes --cluster")
        }
    }
}
