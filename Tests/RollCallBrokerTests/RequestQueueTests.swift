import RollCallCore
import RollCallWire
import Testing

@testable import RollCallBroker

/// The loop's request queue over the fair queue: what is answered at once and what waits, a connection held while
/// its read of the log is out, and what a closed connection's queue still runs.
@Suite("Request queue")
struct RequestQueueTests {
    /// A request of `json` from connection `peer`, as the command endpoint hands it over.
    static func work(_ json: String) throws -> (RequestWork, [UInt8]) {
        let body = Array(json.utf8)
        let envelope = try Codec.decodeRequest(body).get()
        return (.request(envelope, connection: nil, userID: nil, bytes: body.count), body)
    }

    static func route(_ peer: UInt8) -> ReplyRoute { .router(envelope: [[peer]]) }

    /// What each answer was, as `peer:op`, in the order answered.
    final class Answers {
        var log: [String] = []

        /// Notes the answer; none waits for etcd.
        @discardableResult
        func note(_ work: RequestWork, _ route: ReplyRoute) -> Bool {
            guard case .router(let envelope) = route else { return false }
            let op: String
            switch work.decoded(limits: .init()) {
            case .request(let envelope, _, _, _): op = envelope.request.op
            default: op = "?"
            }
            log.append("\(envelope[0][0]):\(op)")
            return false
        }
    }

    /// Cheap requests are answered as they come; an expensive one waits, and so does a cheap one of the same
    /// connection behind it (replies keep each connection's order), while another connection's cheap one goes at once.
    @Test func cheapAtOnceExpensiveWaitsAndOrderIsKept() throws {
        let queue = RequestQueue()
        let answers = Answers()
        for (json, peer) in [
            (#"{"op":"ping"}"#, UInt8(1)), (#"{"op":"group","group":"team"}"#, 1), (#"{"op":"ping"}"#, 1),
            (#"{"op":"ping"}"#, 2),
        ] {
            let (work, body) = try Self.work(json)
            queue.take(work, body: body, key: .router([peer]), route: Self.route(peer), answer: answers.note)
        }
        #expect(answers.log == ["1:ping", "2:ping"])
        #expect(!queue.isEmpty)
        queue.takeTurns(
            { item in
                answers.note(item.work, item.route)
                return .done
            }, full: { _ in Issue.record("no read of the log here") })
        #expect(answers.log == ["1:ping", "2:ping", "1:group", "1:ping"])
        #expect(queue.isEmpty)
    }

    /// A read handed to the log's reader holds its connection: the rest of its turn and what it sends later wait until
    /// the release, in order, while another connection's turns go on; a read that finds the reader full holds its
    /// connection too, read included, and says so.
    @Test func aReadOutHoldsItsConnectionUntilReleased() throws {
        let queue = RequestQueue()
        let answers = Answers()
        for (json, peer) in [
            (#"{"op":"history","user":"alice"}"#, UInt8(1)), (#"{"op":"ping"}"#, 1),
            (#"{"op":"group","group":"team"}"#, 2), (#"{"op":"history","user":"bob"}"#, 3),
        ] {
            let (work, body) = try Self.work(json)
            queue.take(work, body: body, key: .router([peer]), route: Self.route(peer), answer: answers.note)
        }
        var full: [FairnessKey] = []
        queue.takeTurns(
            { item in
                answers.note(item.work, item.route)
                switch answers.log.last {
                case "1:history": return .reading
                case "3:history": return .full
                default: return .done
                }
            }, full: { full.append($0) })
        #expect(answers.log == ["1:history", "2:group", "3:history"])
        #expect(full == [.router([3])])
        #expect(queue.isEmpty)  // both held: nothing takes a turn
        queue.release(.router([1]))
        queue.release(.router([3]))
        queue.takeTurns(
            { item in
                answers.note(item.work, item.route)
                return .done
            }, full: { _ in })
        #expect(answers.log == ["1:history", "2:group", "3:history", "1:ping", "3:history"])
    }

    /// A closed connection's queue gives back its writes, in order, and drops its reads; the queue's bytes go with
    /// them, and the connection takes no more turns.
    @Test func aClosedConnectionKeepsItsWritesOnly() throws {
        let queue = RequestQueue()
        let answers = Answers()
        for json in [
            #"{"op":"group","group":"team"}"#, #"{"op":"bye","session":"s1"}"#, #"{"op":"query","users":["a"]}"#,
            #"{"op":"group","group":"team","add":["carol"]}"#,
        ] {
            let (work, body) = try Self.work(json)
            queue.take(work, body: body, key: .router([7]), route: Self.route(7), answer: answers.note)
        }
        #expect(answers.log.isEmpty)
        let kept = queue.removeAll(for: .router([7]), limits: .init())
        for item in kept { answers.note(item.work, item.route) }
        #expect(answers.log == ["7:bye", "7:group"])
        #expect(queue.isEmpty)
        #expect(!queue.isFull)
    }
}
