import RollCallCore

/// The broker's own heartbeat, published on `broker/`: a subscriber that stops getting it knows its view may be out
/// of date, and one that sees `epoch` change knows the broker restarted.
public struct BrokerHeartbeat: Equatable, Sendable {
    public var broker: String
    public var epoch: String
    public var time: BrokerTime
    /// How often the broker publishes it, so that subscribers know when one is missing.
    public var intervalMilliseconds: Int64
    public var usersAvailable: Int
    public var sessions: Int
    /// Updates sent since the broker started past subscribers with a full queue, which missed them (and maybe more,
    /// uncounted). A subscriber that sees it grow may have missed updates and reads its state again
    /// (docs/protocol.md §8.4).
    /// 0 from a broker that does not report it.
    public var dropped: UInt64
    /// The node and its standing, from a node of a cluster: a subscriber whose node is not `live` knows that the
    /// records it gets may be out of date (docs/cluster.md).
    public var cluster: ClusterStanding?

    public init(
        broker: String, epoch: String, time: BrokerTime, intervalMilliseconds: Int64, usersAvailable: Int,
        sessions: Int,
        dropped: UInt64 = 0, cluster: ClusterStanding? = nil
    ) {
        self.cluster = cluster
        self.broker = broker
        self.epoch = epoch
        self.time = time
        self.intervalMilliseconds = intervalMilliseconds
        self.usersAvailable = usersAvailable
        self.sessions = sessions
        self.dropped = dropped
    }
}

extension Codec {
    /// Encodes a `broker/` message.
    public static func encodeBrokerHeartbeat(_ heartbeat: BrokerHeartbeat) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("broker")
        writer.string(heartbeat.broker)
        writer.key("epoch")
        writer.string(heartbeat.epoch)
        writer.key("time")
        writer.integer(heartbeat.time.milliseconds)
        writer.key("heartbeat_ms")
        writer.integer(heartbeat.intervalMilliseconds)
        writer.key("users_available")
        writer.integer(heartbeat.usersAvailable)
        writer.key("sessions")
        writer.integer(heartbeat.sessions)
        writer.key("dropped")
        writer.integer(heartbeat.dropped)
        if let cluster = heartbeat.cluster { write(cluster, into: &writer) }
        writer.endObject()
        return writer.bytes
    }

    /// Reads a `broker/` message.
    public static func decodeBrokerHeartbeat(_ bytes: [UInt8]) throws -> BrokerHeartbeat {
        guard case .object(let fields) = try JSONParser.parse(bytes), let broker = fields["broker"]?.string,
            let epoch = fields["epoch"]?.string, let time = fields["time"]?.integer,
            let interval = fields["heartbeat_ms"]?.integer, let users = fields["users_available"]?.integer,
            let sessions = fields["sessions"]?.integer
        else {
            throw MalformedMessage(
                description:
                    "a broker heartbeat must carry broker, epoch, time, heartbeat_ms, users_available and sessions")
        }
        // `dropped` is optional: brokers before it did not send it.
        let dropped = fields["dropped"]?.integer.map { UInt64(max(0, $0)) } ?? 0
        return BrokerHeartbeat(
            broker: broker, epoch: epoch, time: BrokerTime(milliseconds: time), intervalMilliseconds: interval,
            usersAvailable: Int(users), sessions: Int(sessions), dropped: dropped,
            cluster: decodeClusterStanding(fields))
    }
}
