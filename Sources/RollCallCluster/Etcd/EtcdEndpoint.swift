/// One etcd member's client URL, as `--cluster etcd://HOST:PORT[,HOST:PORT...]` names it.
public struct EtcdEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public var description: String { "\(host):\(port)" }

    /// Parses `etcd://HOST:PORT[,HOST:PORT...]` (the scheme may be left out; `http://` is accepted too, since etcd
    /// names its own URLs so). Returns `nil` for an empty list, a missing or bad port, or another scheme.
    public static func list(_ text: String) -> [EtcdEndpoint]? {
        var rest = Substring(text)
        for scheme in ["etcd://", "http://"] where rest.hasPrefix(scheme) {
            rest = rest.dropFirst(scheme.count)
        }
        guard !rest.contains("://") else { return nil }
        var endpoints: [EtcdEndpoint] = []
        for item in rest.split(separator: ",", omittingEmptySubsequences: false) {
            var item = item
            for scheme in ["etcd://", "http://"] where item.hasPrefix(scheme) { item = item.dropFirst(scheme.count) }
            guard let colon = item.lastIndex(of: ":"), let port = Int(item[item.index(after: colon)...]),
                (1...65_535).contains(port)
            else { return nil }
            var host = item[..<colon]
            if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
            guard !host.isEmpty, !host.contains("/") else { return nil }
            endpoints.append(EtcdEndpoint(host: String(host), port: port))
        }
        return endpoints.isEmpty ? nil : endpoints
    }
}
