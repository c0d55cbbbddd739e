import DownloadKitRuntime
import Foundation
import Glibc
import HTTPWire
import Testing
import TestOrigin

@testable import HTTPClient

/// The runtime layer (Sources/Runtime) and the waits built on it: a waiter sleeps until it is woken, with no
/// timed slices, and the one EINTR rule throws a typed error naming the call.
@Suite("Runtime layer: waits without polls, the thread bridge, EINTR", .timeLimit(.minutes(5)))
struct RuntimeLayerTests {
    /// A request waiting for a slot at a full origin sleeps until it is cancelled: no 50 ms slices. The pool
    /// used to wake 20 times a second to look at the cancellation flag; now the token wakes it, once.
    @Test func aWaitForAPoolSlotSleepsUntilCancelled() async throws {
        let pool = ConnectionPool(maxPerOrigin: 1, idleLifetime: 60)
        let key = ConnectionKey(origin: Origin(scheme: .http, host: "example.invalid", port: 80), proxy: nil)
        guard case .new = try pool.reserve(origin: key, deadline: .after(seconds: 5), preferFresh: false, cancellation: nil)
        else {
            Issue.record("the first reservation did not get a new slot")
            return
        }
        let token = CancellationToken()
        let waiting = Task {
            try await ThreadBridge.run {
                do throws(TransportError) {
                    _ = try pool.reserve(origin: key, deadline: .after(seconds: 3600), preferFresh: false, cancellation: token)
                    return "reserved"
                } catch {
                    return "\(error.code)"
                }
            }
        }
        try await Task.sleep(for: .seconds(1))
        #expect(pool.waitWakeUps == 0, "the waiter woke \(pool.waitWakeUps) times while nothing happened")
        token.cancel()
        // "cancelled", not a timeout: the token ended the hour-long wait. (No wall-clock bound here: in the full
        // suite the cooperative pool, busy with synchronous tests, once resumed the 1 s sleep above 30 s late.)
        #expect(try await waiting.value == "cancelled")
        #expect(pool.waitWakeUps <= 1)
    }

    /// A returned connection wakes the waiter at once, although its deadline is an hour away.
    @Test func aFreedSlotWakesTheWaiter() async throws {
        let pool = ConnectionPool(maxPerOrigin: 1, idleLifetime: 60)
        let key = ConnectionKey(origin: Origin(scheme: .http, host: "example.invalid", port: 80), proxy: nil)
        _ = try pool.reserve(origin: key, deadline: .after(seconds: 5), preferFresh: false, cancellation: nil)
        let waiting = Task {
            try await ThreadBridge.run {
                guard case .new = try pool.reserve(
                    origin: key, deadline: .after(seconds: 3600), preferFresh: false, cancellation: nil)
                else { return false }
                return true
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        pool.cancelReservation(origin: key)
        #expect(try await waiting.value)
        #expect(pool.waitWakeUps <= 1)
    }

    /// `LockedValue.wait` returns nil at its deadline, measured on the monotonic clock, and the value when
    /// another thread makes it ready.
    @Test func lockedValueWaitEndsAtTheDeadlineOrWhenWoken() async throws {
        let flag = LockedValue(false)
        let start = monotonicSeconds()
        let timedOut: Bool? = flag.wait(until: .after(seconds: 0.2)) { $0 ? true : nil }
        #expect(timedOut == nil)
        #expect(monotonicSeconds() - start >= 0.2)
        let woken = Task {
            try await ThreadBridge.run { flag.wait(until: .after(seconds: 3600)) { $0 ? "woken" : nil } }
        }
        try await Task.sleep(for: .milliseconds(100))
        flag.withLockWakingWaiters { $0 = true }
        #expect(try await woken.value == "woken")
    }

    /// The thread bridge forwards the awaiting task's cancellation to the blocking work.
    @Test func threadBridgeForwardsCancellation() async throws {
        let cancelled = LockedValue(false)
        let task = Task {
            try await ThreadBridge.run(onCancel: { cancelled.withLockWakingWaiters { $0 = true } }) {
                cancelled.wait(until: .after(seconds: 3600)) { $0 ? "stopped" : nil }
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        task.cancel()
        #expect(try await task.value == "stopped")
        // The other direction: a blocking thread waits for an async answer, or gives up at its deadline. The
        // waits run on a thread of their own, as in the library: called from this test's task they blocked one
        // of the cooperative pool's two threads while the answer needed the other, and a whole suite run, the
        // other held by a synchronous test, gave up at a 5 s deadline after 80 s (2026-11-30). The answer is
        // waited for (60 s is a cap, not an expectation); only the give-up uses a short deadline.
        #expect(try await offloaded { ThreadBridge.wait(until: .after(seconds: 60)) { 42 } } == 42)
        #expect(try await offloaded {
            ThreadBridge.wait(until: .after(seconds: 0.1)) { () async throws -> Int in
                try await Task.sleep(for: .seconds(3600))
                return 1
            }
        } == nil)
    }

    /// `retryingEINTR` throws the call's name and its errno, typed.
    @Test func retryingEINTRThrowsTheCallAndItsErrno() {
        #expect(throws: SystemCallError("open", errno: DKErrno(rawValue: ENOENT))) {
            try retryingEINTR("open") { open("/nonexistent/downloadkit-runtime", O_RDONLY) }
        }
        var interrupted = 2
        let result = try? retryingEINTR("dup") { () -> Int32 in
            interrupted -= 1
            if interrupted > 0 {
                errno = EINTR
                return -1
            }
            return 7
        }
        #expect(result == 7)
    }

    /// The public errors carry their error number typed; the cookie file reader's system calls go
    /// through the one EINTR wrapper and name the failed step.
    @Test func publicErrorsGiveTheirErrnoTyped() {
        #expect(throws: AuthFileError.self) { try CookieJar.readFile("/nonexistent/downloadkit-cookies") }
        do {
            _ = try CookieJar.readFile("/nonexistent/downloadkit-cookies")
        } catch {
            #expect(error.errorNumber == DKErrno(rawValue: ENOENT))
            #expect(error.detail == "cannot open: No such file or directory", "\(error)")
        }
        do {
            _ = try CookieJar.readFile("/")
        } catch {
            #expect(error.errorNumber == DKErrno(rawValue: EISDIR))
            #expect(error.detail.hasPrefix("cannot read: "), "\(error)")
        }
        #expect(TransportError(.connectFailed, errorNumber: .connectionRefused, detail: "x").errorNumber == .connectionRefused)
        #expect(TransportError(.readTimeout, detail: "x").errorNumber == nil)
        #expect(BodyFileWriteError(errorNumber: .noSpace).errorNumber == DKErrno(rawValue: ENOSPC))
    }
}
