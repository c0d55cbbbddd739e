import Glibc

/// The one bridge between Swift concurrency and blocking threads, in both directions:
///
/// - ``run(onCancel:_:)``: an async caller runs blocking work on a thread of its own and awaits it,
///   never blocking a thread of the cooperative pool; cancelling the awaiting task calls `onCancel` (which
///   makes the blocking work return: cancel a token, shut a socket down).
/// - ``wait(until:_:)``: a blocking thread (an engine or checkpoint thread, never the cooperative pool)
///   asks an async question and sleeps until the answer or the deadline, cancelling the question when the
///   deadline passes first.
public enum ThreadBridge {
    /// Runs `body` on a new thread and returns what it returns. Cancelling the calling task calls
    /// `onCancel` once, from the cancelling thread.
    public static func run<Result: Sendable>(
        onCancel: @escaping @Sendable () -> Void = {},
        _ body: @escaping @Sendable () throws -> Result
    ) async throws -> Result {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Result, any Error>) in
                startThread {
                    continuation.resume(with: Swift.Result { try body() })
                }
            }
        } onCancel: {
            onCancel()
        }
    }

    /// Asks `question` on a task and blocks the calling thread until it answers or `deadline` passes; then
    /// the task is cancelled and the result is `nil` (so is a thrown error's).
    public static func wait<Result: Sendable>(
        until deadline: Deadline, _ question: @escaping @Sendable () async throws -> Result
    ) -> Result? {
        let answer = LockedValue<Swift.Result<Result, any Error>?>(nil)
        let asking = Task {
            let result: Swift.Result<Result, any Error>
            do {
                result = .success(try await question())
            } catch {
                result = .failure(error)
            }
            answer.withLockWakingWaiters { $0 = result }
        }
        guard let result = answer.wait(until: deadline, { $0 }) else {
            asking.cancel()
            return nil
        }
        return try? result.get()
    }

    /// Starts a detached POSIX thread that runs `body` once (on the calling thread when the process is
    /// out of threads, so the work is never lost).
    package static func startThread(_ body: @escaping @Sendable () -> Void) {
        // Out of threads (EAGAIN): run it here rather than lose the continuation.
        if !tryStartThread(body) { body() }
    }

    /// Starts a detached POSIX thread that runs `body` once, or returns false (and never runs `body`) when
    /// the process is out of threads — for work that must not run on the caller, such as a loop that
    /// blocks until it is told to stop. The new thread starts in the caller's namespaces (its network
    /// namespace included).
    package static func tryStartThread(_ body: @escaping @Sendable () -> Void) -> Bool {
        final class Start {
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        let start = Unmanaged.passRetained(Start(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let status = pthread_create(&thread, &attributes, { context in
            let start = Unmanaged<Start>.fromOpaque(context!).takeRetainedValue()
            start.body()
            return nil
        }, start)
        if status != 0 {
            Unmanaged<Start>.fromOpaque(start).release()
            return false
        }
        return true
    }
}
