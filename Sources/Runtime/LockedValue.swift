import Glibc

/// A value guarded by a `pthread_mutex_t`, with the same `withLock` shape as `Synchronization.Mutex`, and
/// the project's one wait/wake primitive: a thread may wait under the lock until the value says it may go
/// on (``wait(until:_:)``), and whoever changes the value wakes it (``withLockWakingWaiters(_:)``).
///
/// Why not `Mutex`: on Linux it is built on futexes and standard-library atomics that ThreadSanitizer
/// cannot see, so every correctly locked access it guards is reported as a data race (a two-thread
/// counter reproduces it). The project runs its threaded suites under TSan in CI; a lock TSan
/// understands keeps those runs meaningful. Keep critical sections short and never call out of the
/// closure into code that may take another lock.
///
/// The condition variable measures deadlines on `CLOCK_MONOTONIC` (``Deadline``), so a wall-clock step
/// neither ends a wait early nor stretches it. There is no timed poll here: a waiter sleeps until it is
/// woken or its deadline passes, nothing in between.
///
/// `@unchecked Sendable`: `value` is only touched between `pthread_mutex_lock` and `_unlock`.
package final class LockedValue<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var value: Value

    /// Creates the lock holding `value`.
    package init(_ value: Value) {
        self.value = value
        // Heap-allocated so neither moves (a pthread mutex or condition must stay at one address).
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
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

    /// Runs `body` with exclusive access to the value.
    package func withLock<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// Runs `body` with exclusive access to the value, then wakes every thread in ``wait(until:_:)`` so
    /// it looks at the value again.
    package func withLockWakingWaiters<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try withLock(thenWaking: { pthread_cond_broadcast($0) }, body)
    }

    /// Runs `body` with exclusive access to the value, then wakes one thread in ``wait(until:_:)``: for
    /// waiters that all wait for the same thing, of which one change satisfies one (a job handed to one
    /// of several parked threads), where waking them all would only send the others back to sleep.
    package func withLockWakingOneWaiter<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try withLock(thenWaking: { pthread_cond_signal($0) }, body)
    }

    /// Runs `body` under the lock, then `wake`s the condition's waiters. After unlocking: a waiter woken
    /// while the lock is still held would block on it at once. No wake-up is lost: the waiter looks at the
    /// value under the lock before it sleeps.
    private func withLock<Result, Failure: Error>(
        thenWaking wake: (UnsafeMutablePointer<pthread_cond_t>) -> Int32, _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer {
            pthread_mutex_unlock(mutex)
            _ = wake(condition)
        }
        return try body(&value)
    }

    /// Wakes every waiting thread without changing the value: for a condition that lives outside it
    /// (a cancellation flag). Taking the lock first orders the wake after the waiter's last look.
    package func wakeWaiters() {
        withLockWakingWaiters { _ in }
    }

    /// Waits under the lock until `ready` returns a result, or `deadline` passes (then `nil`).
    ///
    /// `ready` runs with exclusive access once at once and again after every wake-up (a change made with
    /// ``withLockWakingWaiters(_:)``, ``wakeWaiters()``, or a spurious one); between those the thread sleeps.
    package func wait<Result, Failure: Error>(
        until deadline: Deadline = .distantFuture, _ ready: (inout Value) throws(Failure) -> Result?
    ) throws(Failure) -> Result? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while true {
            if let result = try ready(&value) { return result }
            if deadline == .distantFuture {
                pthread_cond_wait(condition, mutex)
                continue
            }
            if deadline.hasPassed { return nil }
            var time = timespec(
                tv_sec: Int(deadline.uptimeNanoseconds / 1_000_000_000),
                tv_nsec: Int(deadline.uptimeNanoseconds % 1_000_000_000))
            _ = pthread_cond_timedwait(condition, mutex, &time)
        }
    }
}
