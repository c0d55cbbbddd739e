import HTTPClient
import Glibc

/// A token bucket for bandwidth limits, shared by the transfers it limits (one per download, one for a
/// whole manager). Callers ask how long to wait before they may account for `n` bytes and sleep
/// that long themselves: nothing ever spins.
public final class TokenBucket: Sendable {
    private struct State {
        var rate: Double
        var tokens: Double
        var last: Double
    }

    private let state: LockedValue<State>

    /// Creates a bucket refilling at `bytesPerSecond`, holding at most a quarter second of tokens
    /// (so a limited transfer never bursts far above its rate).
    public init(bytesPerSecond: Int) {
        let rate = Double(max(1, bytesPerSecond))
        state = LockedValue(State(rate: rate, tokens: rate / 4, last: monotonicSeconds()))
    }

    /// The current rate in bytes per second.
    public var bytesPerSecond: Int { state.withLock { Int($0.rate) } }

    /// Changes the rate; takes effect for the next bytes accounted.
    public func setRate(bytesPerSecond: Int) {
        state.withLock { $0.rate = Double(max(1, bytesPerSecond)) }
    }

    /// Accounts for `bytes` just received and returns how many seconds the caller should pause so the
    /// average stays at the rate (0 when under the rate).
    public func delay(afterConsuming bytes: Int) -> Double {
        state.withLock { state in
            let now = monotonicSeconds()
            let burst = state.rate / 4
            state.tokens = min(burst, state.tokens + (now - state.last) * state.rate)
            state.last = now
            state.tokens -= Double(bytes)
            return state.tokens >= 0 ? 0 : -state.tokens / state.rate
        }
    }
}

/// Sleeps for `seconds` in slices of at most 50 ms, returning early (false) when `shouldStop` says so.
func interruptibleSleep(_ seconds: Double, shouldStop: () -> Bool) -> Bool {
    let end = monotonicSeconds() + seconds
    while true {
        if shouldStop() { return false }
        let left = end - monotonicSeconds()
        if left <= 0 { return true }
        let slice = min(left, 0.05)
        var ts = timespec(tv_sec: Int(slice), tv_nsec: Int((slice - Double(Int(slice))) * 1e9))
        _ = nanosleep(&ts, nil)
    }
}
