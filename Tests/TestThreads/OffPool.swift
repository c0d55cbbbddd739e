import CDownloadKitSystem
import DownloadKitRuntime
import Foundation
import Testing

/// Threads of the tests' own, beside Swift's cooperative pool.
///
/// Swift Testing runs every test on the cooperative pool — as many threads as CPUs, two on this project's
/// machines. A synchronous test that blocks (a socket read with a deadline, a child process) or computes holds
/// one of them for its whole run, and every async test in the process then waits for a thread, its time limit
/// counting (docs/TESTING.md). The suites of such tests carry ``OffPool`` (`.offPool`): their test cases run
/// here, on threads no async test needs.
///
/// As many threads as CPUs, at least two: the blocking tests go on at the pace they had on the pool. A fixed
/// number, not one more thread for each job: a suite of a hundred blocking tests starts them all at once, and
/// a hundred tests at a time on two CPUs would stretch each of them past its own deadlines. A job waits in
/// line only behind other tests' jobs; nothing here waits for a job queued behind it, because an unstructured
/// `Task {}` a test starts does not inherit the preference (it runs on the pool) and a structured child of a
/// test only waits for a thread that another test will give back.
public final class OffPoolThreads: TaskExecutor, Sendable {
    /// The one set of threads every `.offPool` suite shares.
    public static let shared = OffPoolThreads(count: max(2, ProcessInfo.processInfo.activeProcessorCount))

    private struct Line {
        var jobs: [UnownedJob] = []
        var next = 0

        mutating func take() -> UnownedJob? {
            guard next < jobs.count else { return nil }
            let job = jobs[next]
            next += 1
            if next == jobs.count { (jobs, next) = ([], 0) }
            return job
        }
    }

    private let line = LockedValue(Line())
    private static let marker = "DownloadKitTests.OffPoolThreads"

    /// Whether the calling thread is one of these.
    public static var isCurrent: Bool { Thread.current.threadDictionary[marker] as? Bool ?? false }

    private init(count: Int) {
        for index in 0..<count {
            Thread {
                // The kernel's name (gdb, `ps -L`, Scripts/pool-holders.sh); Foundation's `name` set before
                // `start()` does not reach it.
                _ = dk_set_current_thread_name("test-thread-\(index)")
                Thread.current.threadDictionary[Self.marker] = true
                self.serve()
            }.start()
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        line.withLockWakingOneWaiter { $0.jobs.append(job) }
    }

    private func serve() {
        while true {
            guard let job = line.wait(until: .distantFuture, { $0.take() }) else { continue }
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// Runs each test case of the suite (or test) it is attached to on ``OffPoolThreads`` instead of the cooperative
/// pool. For suites whose tests block or compute synchronously; an async test in such a suite works too, its
/// structured child tasks running on the same threads.
///
/// Not for a suite with a time limit: Swift Testing starts a test's clock before this trait's scope, so the
/// wait for a free thread here counts against the limit (docs/TESTING.md).
public struct OffPool: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        // Around each test case only: a scope around a whole suite or a whole parameterised test would run
        // nothing but the scheduling of its cases there.
        testCase == nil ? nil : self
    }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(OffPoolThreads.shared) { try await Self.perform(function) }
    }
}

extension OffPool {
    /// Calls `function` after a hop to the task's preferred executor. Needed: the preference alone does not
    /// move the code already running (`withTaskExecutorPreference`'s closure went on where it was), and Swift
    /// Testing's test bodies run where their caller runs. A `@concurrent` function always starts on the
    /// preferred executor, so the body is called from there (checked by OffPoolTests).
    @concurrent
    fileprivate static func perform(_ function: @Sendable () async throws -> Void) async throws {
        try await function()
    }
}

extension Trait where Self == OffPool {
    /// Runs the suite's (or test's) cases on ``OffPoolThreads``, off the cooperative pool (docs/TESTING.md).
    public static var offPool: Self { OffPool() }
}

/// Runs `body` on a new thread of its own and returns its result: for one CPU-bound step of an async test,
/// where the rest of the test belongs on the pool. (TestOrigin's `offloaded` is the throwing form, for the
/// targets that depend on it.)
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}
