import RollCallCore
import Synchronization

/// The moves of the test-mode clock, for what keeps time beside the loop: in `--test-mode` the WebSocket door's
/// pings follow the broker's clock, so that a test reaches "a silent phone is offline" by `advance`, in
/// milliseconds. Listeners are called on the loop's thread, once per move of the clock (an `advance` that fires
/// deadlines on its way moves it once per deadline): they must only hand the time on.
public final class TestClockSignal: Sendable {
    private struct State {
        var time: BrokerTime
        var listeners: [@Sendable (BrokerTime) -> Void] = []
    }

    private let state: Mutex<State>

    init(time: BrokerTime) { state = Mutex(State(time: time)) }

    /// Calls `listener` with every later time of the clock; returns the time now.
    public func observe(_ listener: @escaping @Sendable (BrokerTime) -> Void) -> BrokerTime {
        state.withLock { state in
            state.listeners.append(listener)
            return state.time
        }
    }

    /// The clock moved forward to `time`.
    func moved(to time: BrokerTime) {
        let listeners = state.withLock { state -> [@Sendable (BrokerTime) -> Void] in
            guard time > state.time else { return [] }
            state.time = time
            return state.listeners
        }
        for listener in listeners { listener(time) }
    }
}
