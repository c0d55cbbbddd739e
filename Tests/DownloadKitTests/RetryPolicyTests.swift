import Testing

@_spi(DownloadKitInternal) @testable import DownloadKit

/// The one retry rule of single transfers and segment workers, as failures in and decisions out.
@Suite("RetryPolicy")
struct RetryPolicyTests {
    static let reset = DownloadError(.transport, "connection reset", isTransient: true)
    static let notFound = DownloadError(.httpStatus, "404", httpStatus: 404)

    @Test func transientFailuresAreRetriedUpToTheLimitWithGrowingBackoff() {
        var policy = RetryPolicy(retries: 3, baseDelay: 1, maxDelay: 30)
        var delays: [Double] = []
        for attempt in 1...3 {
            guard case .retry(let delay, let number) = policy.next(after: Self.reset, progress: 0) else {
                Issue.record("attempt \(attempt) must be retried")
                return
            }
            #expect(number == attempt)
            delays.append(delay)
        }
        #expect(policy.next(after: Self.reset, progress: 0) == .fail)
        // Equal jitter: between half and all of base · 2^(n-1).
        #expect((0.5...1).contains(delays[0]))
        #expect((1...2).contains(delays[1]))
        #expect((2...4).contains(delays[2]))
    }

    @Test func aFailureThatIsNotTransientIsNeverRetried() {
        var policy = RetryPolicy(retries: 5, baseDelay: 1, maxDelay: 30)
        #expect(policy.next(after: Self.notFound, progress: 10 << 20) == .fail)
    }

    @Test func progressOf64KiBStartsTheCountAgain() {
        var policy = RetryPolicy(retries: 1, baseDelay: 0.01, maxDelay: 1)
        #expect(policy.next(after: Self.reset, progress: 0) != .fail)
        #expect(policy.next(after: Self.reset, progress: (64 << 10) - 1) == .fail)
        var moving = RetryPolicy(retries: 1, baseDelay: 0.01, maxDelay: 1)
        for _ in 0..<10 {
            #expect(moving.next(after: Self.reset, progress: 64 << 10) != .fail)
        }
    }

    @Test func retryAfterIsHonouredUpToTenMinutes() {
        var policy = RetryPolicy(retries: 3, baseDelay: 1, maxDelay: 30)
        #expect(policy.next(after: Self.reset, progress: 0, retryAfter: 42) == .retry(after: 42, attempt: 1))
        #expect(policy.next(after: Self.reset, progress: 0, retryAfter: 86_400) == .retry(after: 600, attempt: 2))
        #expect(policy.next(after: Self.reset, progress: 0, retryAfter: -5) == .retry(after: 0, attempt: 3))
    }

    @Test func theBackoffCeilingIsCapped() {
        for _ in 0..<100 {
            let delay = RetryPolicy.backoffDelay(attempt: 30, base: 0.5, maximum: 30)
            #expect((15...30).contains(delay))
        }
    }
}
