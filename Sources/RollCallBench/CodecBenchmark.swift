import Foundation
import RollCallCore
import RollCallWire

/// The broker's own work for one status change, without sockets: decode the request, run it through the core,
/// encode the record and the reply. Separates what RollCall costs from what libzmq and the kernel cost.
public enum CodecBenchmark {
    public static func run(iterations: Int) -> BenchRow {
        var core = PresenceCore()
        let now = BrokerTime(milliseconds: 1_800_000_000_000)
        let sessions = (0..<100).map { index -> SessionID in
            let outcome = core.hello(
                .init(user: UserID(validating: "u\(index)")!), session: SessionID("s\(index)"), now: now)
            return try! outcome.reply.get().session
        }
        let bodies = (0..<1_000).map { index in
            Array(
                #"{"op":"status","session":"\#(sessions[index % 100])","status":"online","text":"b\#(1_000_000_000 + index)","id":\#(index)}"#
                    .utf8)
        }
        var decode = Duration.zero
        var apply = Duration.zero
        var encode = Duration.zero
        var bytes = 0
        let clock = ContinuousClock()
        for index in 0..<iterations {
            var envelope: RequestEnvelope?
            decode += clock.measure { envelope = try? Codec.decodeRequest(bodies[index % bodies.count]).get() }
            guard let envelope, case .status(let session, let status, let text, _) = envelope.request else { continue }
            var outcome: Outcome<Void>?
            apply += clock.measure {
                outcome = core.setStatus(session: session, status: status, text: text, now: now + Int64(index))
            }
            encode += clock.measure {
                for record in outcome!.updates { bytes += Codec.encodeRecord(record).count }
                bytes += Codec.encodeReply(id: envelope.id, .success(.done)).count
            }
        }
        let per = { (duration: Duration) in duration.seconds / Double(iterations) * 1e6 }
        return BenchRow(
            id: "R0.codec", scenario: "one status change without sockets: decode, core, encode record and reply",
            figures: ["decode_us": per(decode), "core_us": per(apply), "encode_us": per(encode)],
            summary: "decode **\(f(per(decode)))** µs, core **\(f(per(apply)))** µs, encode **\(f(per(encode)))** µs "
                + "per change (\(n(Double(iterations))) changes, \(bytes / iterations) bytes out each)")
    }
}
