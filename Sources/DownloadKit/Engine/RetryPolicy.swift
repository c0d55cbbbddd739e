import Foundation

/// One retry rule for a single-connection transfer and for every segment worker (issue #12): which
/// failures are retried, how many in a row without progress, and how long to wait. A value: failures in,
/// decisions out (table-tested in `RetryPolicyTests`).
///
/// - Only transient failures are retried (``DownloadError/isTransient``: resets, timeouts, truncation,
///   408/429/5xx, a wrong Content-Range…), at most `retries` in a row; an attempt that moved at least
///   64 KiB starts the count again, so a long download over a flaky link is not capped in total.
/// - The wait is the server's `Retry-After` (capped at 10 minutes) or exponential backoff with equal
///   jitter: a random delay between half and all of `base · 2^(attempt-1)`, capped at `maximum` —
///   never immediate, yet spreading the retries of many clients (AWS Architecture Blog, "Exponential
///   Backoff and Jitter").
struct RetryPolicy: Sendable {
    /// Transient failures allowed in a row without progress.
    let retries: Int
    /// First backoff ceiling, seconds.
    let baseDelay: Double
    /// Largest backoff ceiling, seconds.
    let maxDelay: Double
    /// Progress (bytes) within an attempt that resets the failure count.
    static let progressThatResets: Int64 = 64 << 10
    /// The longest `Retry-After` honoured, seconds.
    static let maxRetryAfter: Double = 600

    private(set) var failuresWithoutProgress = 0

    init(retries: Int, baseDelay: Double, maxDelay: Double) {
        self.retries = retries
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    init(_ configuration: DownloadConfiguration) {
        self.init(
            retries: configuration.retries, baseDelay: configuration.retryBaseDelay.asSeconds,
            maxDelay: configuration.maxRetryDelay.asSeconds)
    }

    /// What to do after a failed attempt.
    enum Decision: Sendable, Equatable {
        /// Wait `delay` seconds, then make attempt number `attempt` (1-based) again.
        case retry(after: Double, attempt: Int)
        /// Give up with the failure.
        case fail
    }

    /// Decides after `failure`, given the bytes the failed attempt moved and a `Retry-After` delay the
    /// server asked for (seconds), if any.
    mutating func next(after failure: DownloadError, progress: Int64, retryAfter: Double? = nil) -> Decision {
        if progress >= Self.progressThatResets { failuresWithoutProgress = 0 }
        guard failure.isTransient, failuresWithoutProgress < retries else { return .fail }
        failuresWithoutProgress += 1
        let delay = retryAfter.map { min(max(0, $0), Self.maxRetryAfter) }
            ?? Self.backoffDelay(attempt: failuresWithoutProgress, base: baseDelay, maximum: maxDelay)
        return .retry(after: delay, attempt: failuresWithoutProgress)
    }

    /// Forgets the failures so far (the low-speed window or a restart begins a new run of attempts).
    mutating func reset() { failuresWithoutProgress = 0 }

    /// Exponential backoff with equal jitter (see the type's description).
    static func backoffDelay(attempt: Int, base: Double, maximum: Double) -> Double {
        let ceiling = min(maximum, base * pow(2, Double(max(1, attempt) - 1)))
        return Double.random(in: (ceiling / 2)...max(ceiling / 2, ceiling))
    }
}

/// One bound and one backoff for restarts — partial data discarded because the resource changed, its
/// length changed, or the server ignored the range — on one connection and with segments alike (issue
/// #13, 1): a server whose validator changes on every request must not loop forever, and the retry
/// count cannot bound it (each restarted attempt may move enough bytes to reset that count).
///
/// The first restart of a run happens at once (a resource that changed once is ordinary); each further
/// one waits ``RetryPolicy/backoffDelay(attempt:base:maximum:)``; after `limit` the download fails.
struct RestartPolicy: Sendable, Hashable {
    /// Restarts allowed in one run of a download.
    var limit = 5
    private(set) var count = 0

    /// The delay (seconds) before the next restart, or nil when the bound is reached.
    mutating func next(base: Double, maximum: Double) -> Double? {
        guard count < limit else { return nil }
        count += 1
        return count == 1 ? 0 : RetryPolicy.backoffDelay(attempt: count - 1, base: base, maximum: maximum)
    }
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
