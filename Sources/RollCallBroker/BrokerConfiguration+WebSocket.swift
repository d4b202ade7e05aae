extension BrokerConfiguration {
    /// Whether a peer can have a user identity (a CURVE key bound to a user, or a WebSocket token): without either,
    /// every peer is an operator, and privacy has no effect (docs/privacy.md).
    var identifiesViewers: Bool {
        curve?.authorizedKeys != nil || webSocket.jwtKeyFile != nil || webSocket.jwtJwksURL != nil
    }

    /// The WebSocket settings' ranges, and the safe default: without tokens, or without TLS, only a loopback
    /// endpoint, unless `--insecure`.
    func validateWebSocket() throws(ConfigurationError) {
        let w = webSocket
        try Self.check("--ws-ping-ms", w.pingMilliseconds, in: WebSocketSettings.Range.pingMilliseconds)
        try Self.check("--ws-max-connections", w.maxConnections, in: WebSocketSettings.Range.maxConnections)
        try Self.check("--ws-max-subscriptions", w.maxSubscriptions, in: WebSocketSettings.Range.maxSubscriptions)
        try Self.check("--ws-send-queue-bytes", w.sendQueueBytes, in: WebSocketSettings.Range.sendQueueBytes)
        try Self.check(
            "--ws-handshake-timeout-ms", w.handshakeMilliseconds, in: WebSocketSettings.Range.handshakeMilliseconds)
        try Self.check(
            "--ws-max-pending-upgrades", w.maxPendingUpgrades, in: WebSocketSettings.Range.maxPendingUpgrades)
        try Self.check(
            "--jwt-max-lifetime-s", w.jwtMaxLifetimeSeconds, in: WebSocketSettings.Range.jwtMaxLifetimeSeconds)
        if let url = w.jwtJwksURL, let problem = WebSocketSettings.problem(jwksURL: url, insecure: insecure) {
            throw ConfigurationError("--jwt-jwks-url", problem)
        }
        let smallest = maxReplyBytes + Self.maxGroupMessageBytes
        guard w.sendQueueBytes >= smallest else {
            throw ConfigurationError(
                "--ws-send-queue-bytes",
                "(\(w.sendQueueBytes)) must hold the largest reply and a group message: at least \(smallest)")
        }
        guard (w.tlsCertFile == nil) == (w.tlsKeyFile == nil) else {
            throw ConfigurationError(
                w.tlsCertFile == nil ? "--ws-tls-key-file" : "--ws-tls-cert-file",
                "needs \(w.tlsCertFile == nil ? "--ws-tls-cert-file" : "--ws-tls-key-file") too")
        }
        guard let endpoint = w.endpoint else { return }
        let (host, _) = try WebSocketSettings.parse(endpoint: endpoint)
        guard !insecure, !WebSocketSettings.isLoopback(host) else { return }
        guard w.jwtKeyFile != nil || w.jwtJwksURL != nil else {
            throw ConfigurationError(
                "--ws-endpoint",
                "'\(endpoint)' is not loopback and no --jwt-key-file or --jwt-jwks-url is given, so anyone who "
                    + "reaches it could act as anyone: give one (docs/websocket.md), or --insecure")
        }
        guard w.tlsCertFile != nil else {
            throw ConfigurationError(
                "--ws-endpoint",
                "'\(endpoint)' is not loopback, and tokens would cross the network in clear text: give "
                    + "--ws-tls-cert-file and --ws-tls-key-file, or bind loopback behind a TLS proxy, or --insecure")
        }
    }
}

extension WebSocketSettings {
    /// `HOST:PORT` (port 0 for a free one; an IPv6 host in brackets) as host and port.
    public static func parse(endpoint: String) throws(ConfigurationError) -> (host: String, port: Int) {
        let usage = "must be HOST:PORT with a port from 0 to 65535, not '\(endpoint)'"
        guard let colon = endpoint.lastIndex(of: ":"), colon != endpoint.startIndex,
            let port = Int(endpoint[endpoint.index(after: colon)...]), (0...65_535).contains(port)
        else { throw ConfigurationError("--ws-endpoint", usage) }
        var host = String(endpoint[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw ConfigurationError("--ws-endpoint", usage) }
        return (host, port)
    }

    /// What is wrong with a JWKS URL, if anything: it must be `https://HOST...`, or `http://` to a loopback host
    /// (keys fetched in clear text from elsewhere could be anyone's) unless `insecure`.
    public static func problem(jwksURL url: String, insecure: Bool) -> String? {
        let lowered = url.lowercased()
        let rest: Substring
        if lowered.hasPrefix("https://") {
            rest = url.dropFirst("https://".count)
        } else if lowered.hasPrefix("http://") {
            rest = url.dropFirst("http://".count)
        } else {
            return "must be an http:// or https:// URL, not '\(url)'"
        }
        var host = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = host.lastIndex(of: "@") { host = host[host.index(after: at)...] }
        if host.hasPrefix("[") {
            host = host.prefix { $0 != "]" }.dropFirst()
        } else if let colon = host.firstIndex(of: ":") {
            host = host[..<colon]
        }
        guard !host.isEmpty, !url.contains(where: { $0 == " " || $0.isNewline }) else {
            return "'\(url)' has no host, or has spaces"
        }
        if lowered.hasPrefix("http://"), !insecure, !WebSocketSettings.isLoopback(String(host)) {
            return "'\(url)' is plain http to a host that is not loopback, so anyone on the way could give the "
                + "broker their keys: use https://, or --insecure"
        }
        return nil
    }

    /// Whether only this machine can reach `host`: `localhost`, `::1`, or an IPv4 address in 127.0.0.0/8 written as
    /// four numbers; never a name that merely starts like one (`127.0.0.1.evil.example` resolves wherever its owner
    /// says).
    public static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127"
            && parts.allSatisfy { part in
                !part.isEmpty && part.count <= 3 && part.allSatisfy { $0.isASCII && $0.isNumber }
                    && Int(part)! <= 255
            }
    }
}
