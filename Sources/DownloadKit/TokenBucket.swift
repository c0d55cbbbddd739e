import Glibc
import HTTPClient
import Synchronization

/// A token bucket for bandwidth limits, shared by the transfers it limits (one per download, one for a
/// whole manager). Callers ask how long to wait before they may account for `n` bytes and sleep
/// that long themselves: nothing ever spins.
public final class TokenBucket: Sendable {
    private struct State {
        var tokens: Double
        var last: Double
    }

    private let state: LockedValue<State>
    /// The rate, read without the lock: an unlimited bucket (shared by every transfer of a manager) is
    /// never locked per read.
    private let currentRate: Atomic<Int>

    /// The rate of a bucket that limits nothing yet: a manager's global and per-task buckets before a
    /// limit is set, so that setting one later takes effect on transfers already running.
    public static let unlimitedRate = 1 << 50

    /// Whether the bucket limits nothing now (its rate is ``unlimitedRate`` or more).
    public var isUnlimited: Bool { bytesPerSecond >= Self.unlimitedRate }

    /// Creates a bucket refilling at `bytesPerSecond`, holding at most a quarter second of tokens
    /// (so a limited transfer never bursts far above its rate).
    public init(bytesPerSecond: Int) {
        let rate = max(1, bytesPerSecond)
        state = LockedValue(State(tokens: Double(rate) / 4, last: monotonicSeconds()))
        currentRate = Atomic(rate)
    }

    /// The current rate in bytes per second.
    public var bytesPerSecond: Int { currentRate.load(ordering: .relaxed) }

    /// Changes the rate; takes effect for the next bytes accounted.
    public func setRate(bytesPerSecond: Int) {
        currentRate.store(max(1, bytesPerSecond), ordering: .relaxed)
    }

    /// Accounts for `bytes` just received and returns how many seconds the caller should pause so the
    /// average stays at the rate (0 when under the rate).
    public func delay(afterConsuming bytes: Int) -> Double {
        let bytesPerSecond = self.bytesPerSecond
        if bytesPerSecond >= Self.unlimitedRate { return 0 }
        let rate = Double(bytesPerSecond)
        return state.withLock { state in
            let now = monotonicSeconds()
            state.tokens = min(rate / 4, state.tokens + (now - state.last) * rate)
            state.last = now
            state.tokens -= Double(bytes)
            return state.tokens >= 0 ? 0 : -state.tokens / rate
        }
    }
}

/// What ends a transfer's waits early: the runtime's wait/wake (``LockedValue``) over a generation that
/// ``wake()`` bumps (a stop request, a segment board that stops). A wait sleeps until its deadline or a
/// wake-up — no periodic polling, so a thousand transfers waiting out rate limits or retry delays cost nothing
/// until one has work, and a pause during a wait takes effect at once.
final class WakeSignal: Sendable {
    private let generation = LockedValue(0)

    init() {}

    /// Wakes every waiter; each checks its `shouldStop` again.
    func wake() {
        generation.withLockWakingWaiters { $0 &+= 1 }
    }

    /// Sleeps for `seconds`, returning early (false) when `shouldStop` holds — checked first and after every
    /// wake-up (a spurious one, which leaves the generation alone, waits on). `shouldStop` must not call
    /// ``wake()``.
    func sleep(_ seconds: Double, shouldStop: () -> Bool) -> Bool {
        var seen: Int?
        let stopped: Bool? = generation.wait(until: .after(seconds: seconds)) { generation in
            if generation == seen { return nil }
            seen = generation
            return shouldStop() ? true : nil
        }
        return stopped == nil ? !shouldStop() : false
    }
}

/// Sleeps for `seconds` or until `wakes` is woken and `shouldStop` holds; false when stopped early.
func interruptibleSleep(_ seconds: Double, wakes: WakeSignal, shouldStop: () -> Bool) -> Bool {
    guard seconds > 0 else { return !shouldStop() }
    return wakes.sleep(seconds, shouldStop: shouldStop)
}

extension TokenBucket {
    /// The one rate-limit wait of single transfers and segment workers: after `count` bytes, sleeps as long
    /// as the slowest of `limiters` asks. Returns false when `shouldStop` ended the wait early.
    static func wait(
        _ limiters: [TokenBucket], afterConsuming count: Int, wakes: WakeSignal, shouldStop: () -> Bool
    ) -> Bool {
        guard !limiters.isEmpty else { return true }
        var delay = 0.0
        for limiter in limiters { delay = max(delay, limiter.delay(afterConsuming: count)) }
        return delay <= 0 || interruptibleSleep(delay, wakes: wakes, shouldStop: shouldStop)
    }
}
