import Testing

@testable import DownloadKitDecisions

/// The one retry rule of single transfers and segment workers, as failures in and decisions out. The
/// jitter is an input, so every delay is exact.
@Suite("RetryPolicy")
struct RetryPolicyTests {
    @Test func transientFailuresAreRetriedUpToTheLimitWithGrowingBackoff() {
        var policy = RetryPolicy(retries: 3, baseDelay: 1, maxDelay: 30)
        var delays: [Double] = []
        for (attempt, jitter) in zip(1...3, [0.0, 1.0, 0.5]) {
            guard case .retry(let delay, let number) = policy.next(transient: true, progress: 0, jitter: jitter) else {
                Issue.record("attempt \(attempt) must be retried")
                return
            }
            #expect(number == attempt)
            delays.append(delay)
        }
        #expect(policy.next(transient: true, progress: 0, jitter: 0) == .fail)
        // Equal jitter: between half (jitter 0) and all (jitter 1) of base · 2^(n-1).
        #expect(delays == [0.5, 2, 3])
    }

    @Test func aFailureThatIsNotTransientIsNeverRetried() {
        var policy = RetryPolicy(retries: 5, baseDelay: 1, maxDelay: 30)
        #expect(policy.next(transient: false, progress: 10 << 20, jitter: 0) == .fail)
    }

    @Test func progressOf64KiBStartsTheCountAgain() {
        var policy = RetryPolicy(retries: 1, baseDelay: 0.01, maxDelay: 1)
        #expect(policy.next(transient: true, progress: 0, jitter: 0) != .fail)
        #expect(policy.next(transient: true, progress: (64 << 10) - 1, jitter: 0) == .fail)
        var moving = RetryPolicy(retries: 1, baseDelay: 0.01, maxDelay: 1)
        for _ in 0..<10 {
            #expect(moving.next(transient: true, progress: 64 << 10, jitter: 0) != .fail)
        }
    }

    @Test func retryAfterIsHonouredUpToTenMinutes() {
        var policy = RetryPolicy(retries: 3, baseDelay: 1, maxDelay: 30)
        #expect(policy.next(transient: true, progress: 0, retryAfter: 42, jitter: 1) == .retry(after: 42, attempt: 1))
        #expect(policy.next(transient: true, progress: 0, retryAfter: 86_400, jitter: 1) == .retry(after: 600, attempt: 2))
        #expect(policy.next(transient: true, progress: 0, retryAfter: -5, jitter: 1) == .retry(after: 0, attempt: 3))
    }

    @Test func theBackoffIsEqualJitterUnderACappedCeiling() {
        let rows: [(attempt: Int, base: Double, maximum: Double, jitter: Double, delay: Double)] = [
            (1, 1, 30, 0, 0.5), (1, 1, 30, 1, 1), (4, 1, 30, 0.25, 5),
            (30, 0.5, 30, 0, 15), (30, 0.5, 30, 1, 30), (200, 0.5, 30, 1, 30),
            // A jitter outside 0...1 is clamped; attempt 0 counts as the first.
            (0, 1, 30, -3, 0.5), (2, 1, 30, 7, 2),
        ]
        for row in rows {
            #expect(
                RetryPolicy.backoffDelay(attempt: row.attempt, base: row.base, maximum: row.maximum, jitter: row.jitter) == row.delay,
                "\(row)")
        }
    }

    @Test func restartsAreImmediateOnceThenBackedOffThenRefused() {
        var restarts = RestartPolicy()
        #expect(restarts.next(base: 1, maximum: 30, jitter: 1) == 0)
        #expect(restarts.next(base: 1, maximum: 30, jitter: 1) == 1)
        #expect(restarts.next(base: 1, maximum: 30, jitter: 0) == 1)
        #expect(restarts.next(base: 1, maximum: 30, jitter: 1) == 4)
        #expect(restarts.next(base: 1, maximum: 30, jitter: 1) == 8)
        #expect(restarts.next(base: 1, maximum: 30, jitter: 1) == nil)
    }
}
