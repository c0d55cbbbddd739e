import DownloadKitDecisions
import Foundation
import HTTPClient

/// What the caller asked a running transfer to do.
enum StopRequest: Sendable, Hashable {
    case none
    case pause
    case cancel
}

/// The state shared between a ``Download`` (any thread, async callers) and its engine thread.
///
/// Small and lock-protected: the engine updates it at coarse grain (progress ticks, state changes,
/// the end), never per socket read. Callbacks and continuations run outside the lock.
final class DownloadControl: Sendable {
    private struct State {
        var stop: StopRequest = .none
        /// The pause was asked for by the cancellation of a task awaiting the result.
        var stoppedByTaskCancellation = false
        var state: DownloadState = .waiting
        var progress = DownloadProgress()
        var outcome: Result<DownloadResult, DownloadError>?
        var resumeData: Data?
        var waiters: [Int: CheckedContinuation<Result<DownloadResult, DownloadError>?, Never>] = [:]
        var nextTicket = 0
        var abandoned: Set<Int> = []
        var isResumable: Bool?
    }

    private let state = LockedValue(State())
    let cancellation = CancellationToken()
    /// Ends the engine's waits (retry delays, backoffs, rate limits) when a stop is requested.
    let wakeUps = WakeSignal()
    /// Every event goes out through here; progress coalesces for slow subscribers, nothing else is dropped.
    let fanout: EventFanout<DownloadEvent>
    /// Logs and metrics of this download's lifecycle, fed from the same events.
    let observer: DownloadObserver

    /// - Parameter keepsEventBacklog: Whether events sent before the first subscription wait for it
    ///   (false when nobody can ever subscribe: the events then cost one short look each).
    init(observer: DownloadObserver = DownloadObserver(logger: nil, url: "", id: ""), keepsEventBacklog: Bool = true) {
        self.observer = observer
        self.fanout = EventFanout<DownloadEvent>(
            capacity: 512, keepsBacklog: keepsEventBacklog,
            isDroppable: { event in
                if case .progress = event { return true }
                return false
            },
            canReplace: { _, _ in true })
    }

    /// A new subscription to this download's events.
    var events: EventSequence<DownloadEvent> { EventSequence(fanout) }

    var stopRequest: StopRequest { state.withLock { $0.stop } }
    var currentState: DownloadState { state.withLock { $0.state } }
    var progress: DownloadProgress { state.withLock { $0.progress } }
    var resumeData: Data? { state.withLock { $0.resumeData } }
    var outcome: Result<DownloadResult, DownloadError>? { state.withLock { $0.outcome } }
    var isResumable: Bool? {
        get { state.withLock { $0.isResumable } }
        set { state.withLock { $0.isResumable = newValue } }
    }

    /// Asks the engine to stop; wakes a blocked read at once.
    func requestStop(_ request: StopRequest, byTaskCancellation: Bool = false) {
        let changed: Bool = state.withLock { state in
            guard state.outcome == nil, state.stop == .none || request == .cancel else { return false }
            state.stop = request
            state.stoppedByTaskCancellation = byTaskCancellation && request == .pause
            return true
        }
        if changed {
            cancellation.cancel()
            wakeUps.wake()
        }
    }

    /// Publishes a state change: the one place a download's state is set and announced (observer, events).
    func setState(_ transition: DownloadTransition) {
        let (newState, reason) = transition.pair
        state.withLock { $0.state = newState }
        observer.stateChanged(newState, reason)
        fanout.yield(.stateChanged(newState, reason))
    }

    func publish(_ progress: DownloadProgress) {
        let delta: Int64 = state.withLock { state in
            let delta = progress.bytesThisRun - state.progress.bytesThisRun
            state.progress = progress
            return delta
        }
        observer.progressed(bytes: delta)
        fanout.yield(.progress(progress))
    }

    func setResumeData(_ data: Data?) {
        state.withLock { $0.resumeData = data }
    }

    /// Records the end and wakes every waiter. Only the first call counts.
    ///
    /// A failure carries the resume data when there is any (as `URLError.downloadTaskResumeData` does);
    /// a pause caused by the cancellation of an awaiting task ends as `.cancelled`, bytes kept.
    func finish(_ outcome: Result<DownloadResult, DownloadError>) {
        let settled: (Result<DownloadResult, DownloadError>, [CheckedContinuation<Result<DownloadResult, DownloadError>?, Never>])? =
            state.withLock { state in
                guard state.outcome == nil else { return nil }
                var outcome = outcome
                if case .failure(var error) = outcome {
                    if error.code == .paused, state.stoppedByTaskCancellation {
                        error = DownloadError(
                            .cancelled,
                            "the task awaiting the download was cancelled; every durable byte was kept and the resume data is attached")
                    }
                    if error.resumeData == nil { error.resumeData = state.resumeData }
                    outcome = .failure(error)
                }
                state.outcome = outcome
                let waiters = Array(state.waiters.values)
                state.waiters = [:]
                return (outcome, waiters)
            }
        guard let (outcome, waiters) = settled else { return }
        observer.finished(outcome)
        switch outcome {
        case .success(let result): fanout.finish(with: .finished(result))
        case .failure(let error): fanout.finish(with: .failed(error))
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }

    /// Waits for the end.
    func wait() async -> Result<DownloadResult, DownloadError> {
        // Without an abandonWait call for its ticket, a wait ends only with the outcome.
        await wait(ticket: makeWaitTicket())!
    }

    /// A ticket for one ``wait(ticket:)`` that ``abandonWait(ticket:)`` can end early.
    func makeWaitTicket() -> Int {
        state.withLock { state in
            defer { state.nextTicket += 1 }
            return state.nextTicket
        }
    }

    /// Waits for the end; nil when the wait was abandoned first.
    func wait(ticket: Int) async -> Result<DownloadResult, DownloadError>? {
        await withCheckedContinuation { continuation in
            let ready: Result<DownloadResult, DownloadError>?? = state.withLock { state in
                if let outcome = state.outcome { return .some(outcome) }
                if state.abandoned.remove(ticket) != nil { return .some(nil) }
                state.waiters[ticket] = continuation
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Ends one wait without the outcome (its task was cancelled); the transfer goes on.
    func abandonWait(ticket: Int) {
        let waiter = state.withLock { state in
            guard state.outcome == nil else { return nil as CheckedContinuation<Result<DownloadResult, DownloadError>?, Never>? }
            guard let waiter = state.waiters.removeValue(forKey: ticket) else {
                state.abandoned.insert(ticket)
                return nil
            }
            return waiter
        }
        waiter?.resume(returning: nil)
    }
}

/// Every state change a download can publish, each with the one reason that belongs to it (issue #12):
/// the engine names what happened and this type decides the (state, reason) pair, so a pair that makes
/// no sense (`.cancelled` with `.pausedByCaller`, `.completed` with `.started`) cannot be written. The
/// public ``DownloadEvent/stateChanged(_:_:)`` carries the pair; docs/ENGINE.md lists them.
enum DownloadTransition: Sendable, Hashable {
    /// A fresh request from byte 0 (`connecting`, `started`).
    case start
    /// A request continuing partial data (`connecting`, `resumed`).
    case resume(offset: Int64)
    /// Partial data discarded (`connecting`, `restarted`).
    case restart(RestartReason)
    /// A redirect followed (`connecting`, `redirected`).
    case redirect(to: String)
    /// A fresh URL from the URL provider (`connecting`, `urlRefreshed`).
    case refreshURL(to: String)
    /// A segmented download stays on one connection (`connecting`, `singleConnection`).
    case stayOnOneConnection(String)
    /// The server cannot resume this resource (`connecting`, `notResumable`).
    case notResumable
    /// Body bytes flow on one connection (`downloading`, `started` or `resumed`).
    case receive(resumedFrom: Int64)
    /// Body bytes flow over several connections (`downloading`, `segmented`).
    case segmented(connections: Int)
    /// Waiting before a retry (`retrying`, `retrying`).
    case retry(after: Duration, attempt: Int, error: DownloadError)
    /// Verifying and placing the file (`verifying`, `bodyComplete`).
    case verify
    /// The file is in place (`completed`, `finished`).
    case complete
    /// The existing destination was kept (`completed`, `keptExistingFile`).
    case keepExistingFile
    /// Stopped by the caller, partial data kept (`paused`, `pausedByCaller`).
    case pause
    /// Cancelled by the caller (`cancelled`, `cancelledByCaller`).
    case cancel
    /// Stopped by a failure (`failed`, `diskFull` or `error`).
    case fail(DownloadError)
    /// A source of a download with mirrors was dropped (`downloading`, `sourceDropped`).
    case dropSource(String, SourceDropReason)

    /// The published (state, reason) pair.
    var pair: (DownloadState, DownloadStateReason) {
        switch self {
        case .start: (.connecting, .started)
        case .resume(let offset): (.connecting, .resumed(offset: offset))
        case .restart(let reason): (.connecting, .restarted(reason))
        case .redirect(let target): (.connecting, .redirected(to: target))
        case .refreshURL(let target): (.connecting, .urlRefreshed(to: target))
        case .stayOnOneConnection(let why): (.connecting, .singleConnection(why))
        case .notResumable: (.connecting, .notResumable)
        case .receive(let offset): (.downloading, offset > 0 ? .resumed(offset: offset) : .started)
        case .segmented(let connections): (.downloading, .segmented(connections: connections))
        case .retry(let delay, let attempt, let error): (.retrying, .retrying(after: delay, attempt: attempt, error: error))
        case .verify: (.verifying, .bodyComplete)
        case .complete: (.completed, .finished)
        case .keepExistingFile: (.completed, .keptExistingFile)
        case .pause: (.paused, .pausedByCaller)
        case .cancel: (.cancelled, .cancelledByCaller)
        case .fail(let failure): (.failed, failure.code == .diskFull ? .diskFull : .error(failure.detail))
        case .dropSource(let source, let reason): (.downloading, .sourceDropped(source: source, reason: reason))
        }
    }
}
