/// Jobs run one at a time, in the order they were handed over, on a thread of their own: the runtime
/// layer's serial queue (where a labelled Dispatch serial queue was), for work that blocks its thread (a SQLite
/// commit, an `fsync`) and must never run on Swift's cooperative pool.
///
/// A thread is started (``ThreadBridge``) when a job arrives and none is draining, and ends when the list
/// is empty; so an idle queue holds no thread. The jobs list is a ``LockedValue``.
package final class SerialThread: Sendable {
    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var draining = false
    }

    private let state = LockedValue(State())

    /// Creates an idle queue.
    package init() {}

    /// Hands `job` over and returns at once; it runs after every job handed over before.
    package func async(_ job: @escaping @Sendable () -> Void) {
        let startsThread = state.withLock { state -> Bool in
            state.jobs.append(job)
            if state.draining { return false }
            state.draining = true
            return true
        }
        if startsThread { ThreadBridge.startThread { [self] in drain() } }
    }

    /// Runs `body` after every job handed over before and returns what it returns (or throws what it
    /// throws), suspending the caller, never blocking it.
    package func run<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Result, any Error>) in
            async { continuation.resume(with: Swift.Result { try body() }) }
        }
    }

    /// Returns once every job handed over before has run.
    package func settle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            async { continuation.resume() }
        }
    }

    /// Blocks the calling thread until every job handed over before has run: for a thread of its own (a
    /// transfer), never for a task on the cooperative pool (use ``settle()``). An idle queue returns at once.
    package func settleBlocking() {
        if state.withLock({ !$0.draining }) { return }
        let done = LockedValue(false)
        async { done.withLockWakingWaiters { $0 = true } }
        _ = done.wait { $0 ? () : nil }
    }

    /// Runs the jobs in batches (everything queued at the time), in order, until none is left.
    private func drain() {
        while true {
            let batch = state.withLock { state -> [@Sendable () -> Void] in
                if state.jobs.isEmpty { state.draining = false }
                defer { state.jobs = [] }
                return state.jobs
            }
            if batch.isEmpty { return }
            for job in batch { job() }
        }
    }
}
