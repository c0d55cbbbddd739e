import DownloadKitDecisions

extension RetryPolicy {
    /// The policy a download's configuration asks for.
    init(_ configuration: DownloadConfiguration) {
        self.init(
            retries: configuration.retries, baseDelay: configuration.retryBaseDelay.asSeconds,
            maxDelay: configuration.maxRetryDelay.asSeconds)
    }

    /// Decides after `failure` (see ``RetryPolicy/next(transient:progress:retryAfter:jitter:)``); the
    /// backoff's random part is drawn here, at the edge, so the policy itself stays a function of its inputs.
    mutating func next(after failure: DownloadError, progress: Int64, retryAfter: Double? = nil) -> Decision {
        next(transient: failure.isTransient, progress: progress, retryAfter: retryAfter, jitter: .random(in: 0...1))
    }
}
