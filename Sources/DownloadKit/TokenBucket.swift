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

/// What ends a transfer's waits early: a `pthread_cond_t` that ``wake()`` broadcasts (a stop request, a
/// segment board that stops). A wait sleeps until its deadline or a wake-up — no periodic polling, so a
/// thousand transfers waiting out rate limits or retry delays cost nothing until one has work, and a pause
/// during a wait takes effect at once (issue #12).
///
/// `@unchecked Sendable`: `generation` is only touched with the mutex held; the mutex and condition live on
/// the heap (a pthread object must not move).
final class WakeSignal: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var generation = 0

    init() {
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)  // the deadline does not move with the wall clock
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Wakes every waiter; each checks its `shouldStop` again.
    func wake() {
        pthread_mutex_lock(mutex)
        generation &+= 1
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Sleeps for `seconds`, returning early (false) when `shouldStop` holds — checked first and after every
    /// wake-up. `shouldStop` must not call ``wake()``.
    func sleep(_ seconds: Double, shouldStop: () -> Bool) -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let whole = seconds.rounded(.down)
        var deadline = timespec(
            tv_sec: now.tv_sec + Int(min(whole, 1e9)), tv_nsec: now.tv_nsec + Int((seconds - whole) * 1e9))
        if deadline.tv_nsec >= 1_000_000_000 {
            deadline.tv_sec += 1
            deadline.tv_nsec -= 1_000_000_000
        }
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while true {
            if shouldStop() { return false }
            let seen = generation
            repeat {
                if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT { return !shouldStop() }
            } while generation == seen  // a spurious wake-up: wait on
        }
    }
}

/// Sleeps for `seconds` or until `wakes` is woken and `shouldStop` holds; false when stopped early.
func interruptibleSleep(_ seconds: Double, wakes: WakeSignal, shouldStop: () -> Bool) -> Bool {
    guard seconds > 0 else { return !shouldStop() }
    return wakes.sleep(seconds, shouldStop: shouldStop)
}
