import RollCallCluster
import Testing

@Suite struct EtcdEndpointTests {
    /// A list of members in `--cluster`'s form parses into hosts and ports, in order.
    @Test func parsesAList() {
        #expect(
            EtcdEndpoint.list("etcd://10.0.0.1:2379,db.example:2380,[::1]:2381") == [
                EtcdEndpoint(host: "10.0.0.1", port: 2379), EtcdEndpoint(host: "db.example", port: 2380),
                EtcdEndpoint(host: "::1", port: 2381),
            ])
        #expect(EtcdEndpoint.list("127.0.0.1:2379") == [EtcdEndpoint(host: "127.0.0.1", port: 2379)])
        #expect(EtcdEndpoint.list("http://127.0.0.1:2379") == [EtcdEndpoint(host: "127.0.0.1", port: 2379)])
    }

    /// An empty list, a missing or out-of-range port, an empty host or another scheme is refused.
    @Test(arguments: [
        "", "etcd://", "etcd://host", "etcd://host:0", "etcd://host:70000", "etcd://:2379",
        "https://host:2379", "etcd://a:1,,b:2", "etcd://a:1/path",
    ])
    func refusesBadLists(_ text: String) {
        #expect(EtcdEndpoint.list(text) == nil)
    }
}
