import Glibc

/// A value guarded by a `pthread_mutex_t`, with the same `withLock` shape as `Synchronization.Mutex`.
///
/// Why not `Mutex`: on Linux it is built on futexes and standard-library atomics that ThreadSanitizer
/// cannot see, so every correctly locked access it guards is reported as a data race (a two-thread
/// counter reproduces it). The project runs its threaded suites under TSan in CI; a lock TSan
/// understands keeps those runs meaningful. Keep critical sections short and never call out of the
/// closure into code that may take another lock.
///
/// `@unchecked Sendable`: `value` is only touched between `pthread_mutex_lock` and `_unlock`.
package final class LockedValue<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    /// Creates the lock holding `value`.
    package init(_ value: Value) {
        self.value = value
        // Heap-allocated so the mutex never moves (a pthread mutex must stay at one address).
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
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
}
