/// One retry rule for a single-connection transfer and for every segment worker: which
/// failures are retried, how many in a row without progress, and how long to wait. A value: failures in,
/// decisions out (table-tested in `RetryPolicyTests`). The random part of a wait is an input (`jitter`,
/// drawn by the caller), so the policy answers the same for the same inputs.
///
/// - Only transient failures are retried (`DownloadError.isTransient`: resets, timeouts, truncation,
///   408/429/5xx, a wrong Content-Range…), at most `retries` in a row; an attempt that moved at least
///   64 KiB starts the count again, so a long download over a flaky link is not capped in total.
/// - The wait is the server's `Retry-After` (capped at 10 minutes) or exponential backoff with equal
///   jitter: a random delay between half and all of `base · 2^(attempt-1)`, capped at `maximum` —
///   never immediate, yet spreading the retries of many clients (AWS Architecture Blog, "Exponential
///   Backoff and Jitter").
package struct RetryPolicy: Sendable {
    /// Transient failures allowed in a row without progress.
    package let retries: Int
    /// First backoff ceiling, seconds.
    package let baseDelay: Double
    /// Largest backoff ceiling, seconds.
    package let maxDelay: Double
    /// Progress (bytes) within an attempt that resets the failure count.
    package static let progressThatResets: Int64 = 64 << 10
    /// The longest `Retry-After` honoured, seconds.
    package static let maxRetryAfter: Double = 600

    package private(set) var failuresWithoutProgress = 0

    package init(retries: Int, baseDelay: Double, maxDelay: Double) {
        self.retries = retries
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    /// What to do after a failed attempt.
    package enum Decision: Sendable, Equatable {
        /// Wait `delay` seconds, then make attempt number `attempt` (1-based) again.
        case retry(after: Double, attempt: Int)
        /// Give up with the failure.
        case fail
    }

    /// Decides after a failed attempt that moved `progress` bytes, given whether the failure is transient,
    /// a `Retry-After` delay the server asked for (seconds), if any, and `jitter` in `0...1` (the caller's
    /// random draw, ``backoffDelay(attempt:base:maximum:jitter:)``).
    package mutating func next(transient: Bool, progress: Int64, retryAfter: Double? = nil, jitter: Double) -> Decision {
        if progress >= Self.progressThatResets { failuresWithoutProgress = 0 }
        guard transient, failuresWithoutProgress < retries else { return .fail }
        failuresWithoutProgress += 1
        let delay = retryAfter.map { min(max(0, $0), Self.maxRetryAfter) }
            ?? Self.backoffDelay(attempt: failuresWithoutProgress, base: baseDelay, maximum: maxDelay, jitter: jitter)
        return .retry(after: delay, attempt: failuresWithoutProgress)
    }

    /// Forgets the failures so far (the low-speed window or a restart begins a new run of attempts).
    package mutating func reset() { failuresWithoutProgress = 0 }

    /// Exponential backoff with equal jitter (see the type's description): `jitter` in `0...1` picks the
    /// point between half the ceiling (0) and the ceiling (1); values outside are clamped.
    package static func backoffDelay(attempt: Int, base: Double, maximum: Double, jitter: Double) -> Double {
        // 2^(attempt-1) without Foundation's pow; the exponent is capped where the ceiling is long past any maximum.
        let doublings = min(max(1, attempt) - 1, 62)
        let ceiling = min(maximum, base * Double(Int64(1) << Int64(doublings)))
        return ceiling / 2 + min(max(jitter, 0), 1) * (ceiling / 2)
    }
}

/// One bound and one backoff for restarts — partial data discarded because the resource changed, its
/// length changed, or the server ignored the range — on one connection and with segments alike: a server whose validator changes on every request must not loop forever, and the retry
/// count cannot bound it (each restarted attempt may move enough bytes to reset that count).
///
/// The first restart of a run happens at once (a resource that changed once is ordinary); each further
/// one waits ``RetryPolicy/backoffDelay(attempt:base:maximum:jitter:)``; after `limit` the download fails.
package struct RestartPolicy: Sendable, Hashable {
    /// Restarts allowed in one run of a download.
    package var limit = 5
    package private(set) var count = 0

    package init() {}

    /// The delay (seconds) before the next restart, or nil when the bound is reached; `jitter` as for
    /// ``RetryPolicy/backoffDelay(attempt:base:maximum:jitter:)``.
    package mutating func next(base: Double, maximum: Double, jitter: Double) -> Double? {
        guard count < limit else { return nil }
        count += 1
        return count == 1 ? 0 : RetryPolicy.backoffDelay(attempt: count - 1, base: base, maximum: maximum, jitter: jitter)
    }
}
