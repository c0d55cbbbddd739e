/// The retry, restart, URL-expiry and source-drop decisions of one segment worker on one source, as a
/// value: the worker reports what happened (``Event``) and performs what comes back (``Action``). No I/O,
/// no clock, no randomness: the retry wait's jitter comes in with the failure, and every state lives in
/// ``State``'s cases.
///
/// The paths after a failed attempt, in the order they are decided:
/// - stopped (the board or the caller stopped, the exchange was cancelled): the worker ends;
/// - a restart (the resource changed, or its length did) on the only or the first source: the download
///   starts over; on a mirror it is that mirror's failure;
/// - an "expired URL" status (``expiredStatuses``) without mirrors: the engine asks for a fresh URL;
/// - too slow, on a source the scheduler drops when slow: that source is dropped;
/// - nothing left to compare a mirror's sample with: that mirror is dropped;
/// - transient, within ``Rules/retries`` failures in a row without progress: a wait (exponential backoff
///   with equal jitter), then the worker goes on;
/// - anything else: with mirrors the source is dropped (the download fails when it was the last one),
///   without them the download fails.
package struct SegmentAttemptMachine: Sendable, Hashable {
    /// The statuses that may mean a signed or temporary URL expired: without mirrors the engine asks its
    /// URL provider for a fresh one rather than failing.
    package static let expiredStatuses = URLExpiry.statuses

    /// The retry rule and where the worker's requests go.
    package struct Rules: Sendable, Hashable {
        /// Transient failures allowed in a row without progress.
        package var retries: Int
        /// First backoff ceiling, seconds.
        package var baseDelay: Double
        /// Largest backoff ceiling, seconds.
        package var maxDelay: Double
        /// Bytes an attempt must move for its failure to start the count again.
        package var progressThatResets: Int64
        /// Whether the source is one of several: past the retry rule it is dropped, and only the last
        /// one's drop fails the download.
        package var hasSources: Bool
        /// Whether the source is a mirror (not the first source): its change of version is its own failure,
        /// never a restart of the download.
        package var isMirror: Bool

        package init(
            retries: Int, baseDelay: Double, maxDelay: Double, progressThatResets: Int64, hasSources: Bool, isMirror: Bool
        ) {
            self.retries = retries
            self.baseDelay = baseDelay
            self.maxDelay = maxDelay
            self.progressThatResets = progressThatResets
            self.hasSources = hasSources
            self.isMirror = isMirror
        }
    }

    /// A failure as the worker classifies the error an attempt ended with.
    package enum Failure: Sendable, Hashable {
        /// The board or the caller stopped, or the exchange was cancelled.
        case stopped
        /// The partial data no longer matches the resource (validator, length, an ignored range).
        case restart
        /// One of ``expiredStatuses``.
        case expired(status: Int)
        /// Below the low-speed limit for its window; `dropsSource`: the scheduler would rather drop this
        /// source than retry it (another one is left).
        case tooSlow(bytesPerSecond: Int, dropsSource: Bool)
        /// A mirror's answer needs a sample and no bytes are, or will be, written to compare it with.
        case unverifiable
        /// Worth another attempt (a reset, a timeout, a short body, a 5xx…).
        case transient
        /// Not worth another attempt.
        case permanent
    }

    /// What happened, as the worker reports it.
    package enum Event: Sendable, Hashable {
        /// The worker took a segment from the board: a new run of attempts.
        case segmentTaken
        /// A mirror's sample agreed with the written bytes: a new run of attempts.
        case sampleAgreed
        /// A series of range requests ended as asked; the held segment may owe more.
        case fetched
        /// The held segment ended (its tail went to another worker, or no range is left in it).
        case rangeEnded
        /// The mirror's answer agrees on the length but needs a sample before its bytes are written.
        case needsSample
        /// The source was dropped (a disagreeing answer or sample, or by another worker).
        case sourceDropped
        /// An attempt failed after moving `progress` bytes; `jitter` in `0...1` places the retry wait.
        case failed(Failure, progress: Int64, jitter: Double)
        /// The retry wait ended: `completed`, or cut short by a stop.
        case waited(completed: Bool)
        /// The source board's answer to ``Action/dropSource(_:)``: whether that source was the last one.
        case dropAnswered(wasLast: Bool)
        /// The board or the caller stopped, or nothing is left to fetch.
        case stopped
    }

    /// Why the worker drops its source.
    package enum DropCause: Sendable, Hashable {
        case tooSlow(bytesPerSecond: Int)
        case unverifiable
        /// Failed past the retry rule, or a failure not worth retrying.
        case failed
    }

    /// How the worker stops the board (every worker then ends).
    package enum BoardStop: Sendable, Hashable {
        /// The download starts over (the reason is the failure's).
        case restart
        /// The engine asks for a fresh URL.
        case refreshURL(status: Int)
        /// The download fails with the attempt's failure.
        case failed
        /// The download fails: the last source was dropped, with the attempt's failure.
        case everySourceDropped
    }

    /// What the worker does next.
    package enum Action: Sendable, Hashable {
        /// Request the next range of the held segment (or the mirror's sample again).
        case proceed
        /// Hand the held segment back to the board and take another.
        case nextSegment
        /// Start the low-speed window over, wait `seconds` (ended early by a stop), report ``Event/waited(completed:)``.
        case wait(seconds: Double)
        /// Drop the source on the source board, report ``Event/dropAnswered(wasLast:)``.
        case dropSource(DropCause)
        /// Stop the board; the worker ends.
        case stopBoard(BoardStop)
        /// Leave this source; the worker may take another one.
        case leaveSource
        /// End the worker.
        case finish
    }

    /// Where the worker stands with its source.
    package enum State: Sendable, Hashable {
        /// Fetching, after `failures` transient failures in a row without progress.
        case running(failures: Int)
        /// Waiting out a retry delay; then running with `failures`.
        case waiting(failures: Int)
        /// Waiting for the source board's answer to a drop.
        case dropping
        /// Done with this source: left it (the worker may take another), or the worker ends.
        case ended(leftSource: Bool)
    }

    package let rules: Rules
    private(set) var state: State = .running(failures: 0)

    package init(rules: Rules) {
        self.rules = rules
    }

    /// Applies `event` and returns what the worker does next.
    package mutating func handle(_ event: Event) -> Action {
        switch (state, event) {
        case (.ended(let left), _):
            return left ? .leaveSource : .finish
        case (_, .stopped):
            return end(leftSource: false)
        case (.waiting(let failures), .waited(let completed)):
            guard completed else { return end(leftSource: false) }
            state = .running(failures: failures)
            return .proceed
        case (.dropping, .dropAnswered(let wasLast)):
            guard wasLast else { return end(leftSource: true) }
            state = .ended(leftSource: false)
            return .stopBoard(.everySourceDropped)
        case (.running, .segmentTaken), (.running, .sampleAgreed):
            state = .running(failures: 0)
            return .proceed
        case (.running, .fetched):
            return .proceed
        case (.running, .rangeEnded), (.running, .needsSample):
            // A segment waiting for a sample goes back to the board meanwhile.
            return .nextSegment
        case (.running, .sourceDropped):
            return end(leftSource: true)
        case (.running(let failures), .failed(let failure, let progress, let jitter)):
            return failed(failure, failures: failures, progress: progress, jitter: jitter)
        case (.running, _), (.waiting, _), (.dropping, _):
            // An answer to a question not asked: the worker's own mistake. Ending it loses nothing (its
            // segment goes back to the board) and cannot loop.
            assertionFailure("segment attempt: \(event) in \(state)")
            return end(leftSource: false)
        }
    }

    private mutating func failed(_ failure: Failure, failures: Int, progress: Int64, jitter: Double) -> Action {
        switch failure {
        case .stopped:
            return end(leftSource: false)
        case .restart where !rules.isMirror:
            state = .ended(leftSource: false)
            return .stopBoard(.restart)
        case .expired(let status) where !rules.hasSources:
            state = .ended(leftSource: false)
            return .stopBoard(.refreshURL(status: status))
        case .tooSlow(let rate, dropsSource: true) where rules.hasSources:
            return drop(.tooSlow(bytesPerSecond: rate))
        case .unverifiable where rules.hasSources:
            return drop(.unverifiable)
        case .transient, .tooSlow:
            let count = progress >= rules.progressThatResets ? 0 : failures
            guard count < rules.retries else { return giveUp() }
            state = .waiting(failures: count + 1)
            return .wait(seconds: RetryPolicy.backoffDelay(attempt: count + 1, base: rules.baseDelay, maximum: rules.maxDelay, jitter: jitter))
        case .restart, .expired, .unverifiable, .permanent:
            return giveUp()
        }
    }

    /// Past the retry rule: the source goes (with mirrors), or the download fails.
    private mutating func giveUp() -> Action {
        guard rules.hasSources else {
            state = .ended(leftSource: false)
            return .stopBoard(.failed)
        }
        return drop(.failed)
    }

    private mutating func drop(_ cause: DropCause) -> Action {
        state = .dropping
        return .dropSource(cause)
    }

    private mutating func end(leftSource: Bool) -> Action {
        state = .ended(leftSource: leftSource)
        return leftSource ? .leaveSource : .finish
    }
}
