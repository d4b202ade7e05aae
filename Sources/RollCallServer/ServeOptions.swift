import RollCallBroker
import RollCallCore
import RollCallOperations
import RollCallWebhooks

/// What `rollcall serve` was told, before the rules that tie settings together: the broker's settings already read
/// (each from its flag, else its environment variable, else ``BrokerConfiguration``'s default), and the settings
/// whose meaning depends on others. ``configuration()`` applies those rules, reads the CURVE files and validates.
public struct ServeOptions: Sendable {
    /// The broker's settings; its endpoints, storage, CURVE and cluster are set from the fields below.
    public var broker = BrokerConfiguration()
    /// The endpoints given; `nil`: ``broker``'s, or free loopback ports in test mode.
    public var commandEndpoint: String?
    public var updateEndpoint: String?
    /// `--data-dir`, `--ephemeral`, and where the state goes when neither is given.
    public var dataDirectory: String?
    public var ephemeral = false
    public var defaultDataDirectory = "."
    /// `--cluster`, `--node-id`, `--node-lease-ms`.
    public var cluster: String?
    public var nodeID: String?
    public var nodeLeaseMilliseconds: Int64?
    /// `--curve-secret-key-file` and `--authorized-keys`.
    public var curveSecretKeyFile: String?
    public var authorizedKeysFile: String?
    /// The operations endpoint, if `--http-endpoint` was given.
    public var operations: OperationsSettings?
    /// `--webhook-url` and the other `--webhook-*` settings (docs/webhooks.md); no URL turns delivery off.
    public var webhooks = WebhookSettings()
    /// `--webhook-secret-file`: the `whsec_` secret that signs every delivery; required with a URL.
    public var webhookSecretFile: String?

    public init() {}

    /// Test mode takes free loopback ports unless told otherwise, so that tests can run side by side.
    public static let freeLoopbackEndpoint = "tcp://127.0.0.1:*"

    /// The configuration these options describe, with every rule across settings applied and every setting
    /// checked: the first fault is thrown, naming its setting.
    public func configuration() throws(ConfigurationError) -> ServerConfiguration {
        var c = broker
        let free = c.testMode ? Self.freeLoopbackEndpoint : nil
        c.commandEndpoint = commandEndpoint ?? free ?? c.commandEndpoint
        c.updateEndpoint = updateEndpoint ?? free ?? c.updateEndpoint
        // A node of a cluster keeps its state in etcd, a test-mode broker nowhere: no data directory unless one is
        // named (a node then keeps its presence log there: docs/history.md, "On a cluster").
        if ephemeral || ((c.testMode || cluster != nil) && dataDirectory == nil) {
            guard dataDirectory == nil else {
                throw ConfigurationError("--ephemeral", "and --data-dir exclude each other")
            }
            c.storage = .none
        } else {
            c.storage = .directory(dataDirectory ?? defaultDataDirectory)
        }
        c.curve = try CurveFiles.load(secretKeyFile: curveSecretKeyFile, authorizedKeysFile: authorizedKeysFile)
        if let cluster {
            let id = nodeID ?? c.brokerID
            if nodeID == nil && !ClusterSettings.isValidNodeID(id) {
                throw ConfigurationError(
                    "--node-id",
                    "was not given, and the broker id '\(id)' (--broker-id, else the host name) is not a valid "
                        + "node id (1 to 64 of A-Z a-z 0-9 . _ -): give --node-id")
            }
            c.cluster = try ClusterSettings(
                cluster: cluster, nodeID: id,
                leaseMilliseconds: nodeLeaseMilliseconds ?? ClusterSettings.defaultLeaseMilliseconds)
        } else if nodeID != nil || nodeLeaseMilliseconds != nil {
            throw ConfigurationError("--node-id", "and --node-lease-ms need --cluster")
        }
        let configuration = ServerConfiguration(
            broker: c, operations: operations,
            webhooks: try webhookConfiguration(keepsLog: Self.keepsLog(c)))
        try configuration.validate()
        return configuration
    }

    /// The webhook settings checked and the secret read, or `nil` without a URL.
    private func webhookConfiguration(keepsLog: Bool) throws(ConfigurationError)
        -> WebhookConfiguration?
    {
        do {
            try webhooks.validate()
        } catch {
            throw ConfigurationError(error.setting, error.message)
        }
        guard !webhooks.urls.isEmpty else {
            guard webhookSecretFile == nil else {
                throw ConfigurationError("--webhook-secret-file", "needs --webhook-url: there is nothing to sign")
            }
            return nil
        }
        // Delivery reads the presence log, and keeps its cursors with it (on a cluster, in etcd).
        guard keepsLog else {
            throw ConfigurationError(
                "--webhook-url",
                "needs the presence log: a data directory (not --ephemeral) and --history-retention-ms above 0")
        }
        guard let path = webhookSecretFile else {
            throw ConfigurationError(
                "--webhook-url", "needs --webhook-secret-file: a file holding the whsec_ secret that signs deliveries")
        }
        do {
            return WebhookConfiguration(settings: webhooks, signer: try WebhookConfiguration.readSecret(path: path))
        } catch {
            throw ConfigurationError(error.setting, error.message)
        }
    }

    /// Whether a broker with `c` keeps a presence log: a data directory and a retention above 0.
    private static func keepsLog(_ c: BrokerConfiguration) -> Bool {
        guard case .directory = c.storage else { return false }
        return c.historyRetentionMilliseconds > 0
    }
}
