import ArgumentParser
import Foundation
import RollCallBench

/// `rollcall-bench cluster`: the cluster's figures beside a single broker's, in one run (docs/cluster.md).
struct ClusterBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cluster",
        abstract: "Three nodes on a three-member etcd beside one broker: cross-node latency, burst, node death.",
        discussion: """
            Needs etcd: scripts/install-etcd unpacks it into .build-etcd/ (or set ROLLCALL_ETCD). C1 times one change \
            at a time to a subscriber on another node, and on a single broker; C2 counts a burst of changes to the \
            last delivery on another node, and on a single broker; C3 times a killed node's sessions to their end.
            """)

    @Flag(help: "A small, fast run that only checks the benchmark works.") var smoke = false
    @Option(help: "Changes in the burst (C2).") var changes = 20_000
    @Option(help: "Write the rows as JSON to this file.") var json: String?
    @Flag(help: "Give each node a data directory, so that it keeps the presence log (docs/history.md).")
    var logs = false
    @Flag(help: "Also give every node a webhook URL (a receiver in this process); implies --logs (docs/webhooks.md).")
    var webhooks = false

    func run() async throws {
        var parameters = smoke ? ClusterBenchmark.Parameters.smoke : ClusterBenchmark.Parameters()
        if !smoke { parameters.burstChanges = changes }
        parameters.nodesKeepLogs = logs || webhooks
        parameters.webhooks = webhooks
        let rows = try await ClusterBenchmark(executable: brokerExecutable(), parameters: parameters) { line in
            FileHandle.standardError.write(Data("bench: \(line)\n".utf8))
        }.run()
        for row in rows where row.histogram != nil {
            emit("\n== \(row.id): \(row.scenario) (ms)\n\(row.histogram!)")
        }
        emit(BenchRow.table(rows))
        if let json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(rows).write(to: URL(fileURLWithPath: json))
        }
        let received = rows.first { $0.id == "C2.throughput" }?.figures["cluster_received"] ?? 0
        if received < Double(parameters.burstChanges) {
            throw fail(BenchError("the cluster lost changes: \(Int(received)) of \(parameters.burstChanges) arrived"))
        }
    }
}
