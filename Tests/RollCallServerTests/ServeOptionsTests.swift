import RollCallBroker
import RollCallOperations
import RollCallServer
import Testing

/// The rules across `rollcall serve`'s settings, as the assembly applies them, without starting anything.
@Suite struct ServeOptionsTests {
    /// With nothing given, the broker's own defaults hold and the state goes to the default data directory.
    @Test func defaultsAreTheBrokerConfigurations() throws {
        var options = ServeOptions()
        options.defaultDataDirectory = "/var/lib/rollcall"
        let configuration = try options.configuration()
        #expect(configuration.broker.commandEndpoint == BrokerConfiguration().commandEndpoint)
        #expect(configuration.broker.updateEndpoint == BrokerConfiguration().updateEndpoint)
        guard case .directory(let directory) = configuration.broker.storage else {
            Issue.record("no data directory")
            return
        }
        #expect(directory == "/var/lib/rollcall")
        #expect(configuration.operations == nil)
    }

    /// Test mode takes free loopback ports and keeps nothing, unless told otherwise.
    @Test func testModeTakesFreePortsAndKeepsNothing() throws {
        var options = ServeOptions()
        options.broker.testMode = true
        let configuration = try options.configuration()
        #expect(configuration.broker.commandEndpoint == "tcp://127.0.0.1:*")
        #expect(configuration.broker.updateEndpoint == "tcp://127.0.0.1:*")
        guard case .none = configuration.broker.storage else {
            Issue.record("a test-mode broker keeps state")
            return
        }
    }

    /// `--ephemeral` and `--data-dir` exclude each other.
    @Test func ephemeralExcludesADataDirectory() {
        var options = ServeOptions()
        options.ephemeral = true
        options.dataDirectory = "/tmp/x"
        #expect(throws: ConfigurationError("--ephemeral", "and --data-dir exclude each other")) {
            try options.configuration()
        }
    }

    /// A node id or lease without `--cluster` is refused, and so is an invalid broker id taken as the node id.
    @Test func nodeSettingsNeedACluster() {
        var options = ServeOptions()
        options.nodeID = "n1"
        #expect(throws: ConfigurationError("--node-id", "and --node-lease-ms need --cluster")) {
            try options.configuration()
        }
        var cluster = ServeOptions()
        cluster.cluster = "etcd://127.0.0.1:2379"
        cluster.broker.brokerID = "not a node id!"
        #expect(throws: ConfigurationError.self) { try cluster.configuration() }
        cluster.nodeID = "n1"
        #expect(throws: Never.self) { try cluster.configuration() }
    }

    /// A CURVE secret key file without the authorized keys (or the keys without the secret) is refused by name.
    @Test func curveNeedsBothFiles() {
        var secretOnly = ServeOptions()
        secretOnly.curveSecretKeyFile = "/nonexistent/secret"
        #expect(throws: ConfigurationError.self) { try secretOnly.configuration() }
        var keysOnly = ServeOptions()
        keysOnly.authorizedKeysFile = "/nonexistent/keys"
        #expect(throws: ConfigurationError.self) { try keysOnly.configuration() }
    }

    /// The operations endpoint's settings are checked: an address that is not HOST:PORT and timeouts out of range.
    @Test func operationsSettingsAreChecked() {
        var options = ServeOptions()
        options.operations = OperationsSettings(endpoint: "nowhere")
        #expect(throws: ConfigurationError.self) { try options.configuration() }
        var settings = OperationsSettings(endpoint: "127.0.0.1:0")
        settings.headerTimeoutMilliseconds = 0
        options.operations = settings
        #expect(throws: ConfigurationError.self) { try options.configuration() }
        settings.headerTimeoutMilliseconds = 5_000
        options.operations = settings
        #expect(throws: Never.self) { try options.configuration() }
    }
}
