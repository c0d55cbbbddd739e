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
        var state: DownloadState = .waiting
        var progress = DownloadProgress()
        var outcome: Result<DownloadResult, DownloadError>?
        var resumeData: Data?
        var waiters: [CheckedContinuation<Result<DownloadResult, DownloadError>, Never>] = []
        var isResumable: Bool?
    }

    private let state = LockedValue(State())
    let cancellation = CancellationToken()
    let continuation: AsyncStream<DownloadEvent>.Continuation
    let events: AsyncStream<DownloadEvent>

    init() {
        let (stream, continuation) = AsyncStream<DownloadEvent>.makeStream(bufferingPolicy: .bufferingNewest(512))
        self.events = stream
        self.continuation = continuation
    }

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
    func requestStop(_ request: StopRequest) {
        let changed: Bool = state.withLock { state in
            guard state.outcome == nil, state.stop == .none || request == .cancel else { return false }
            state.stop = request
            return true
        }
        if changed { cancellation.cancel() }
    }

    func setState(_ newState: DownloadState, _ reason: DownloadStateReason) {
        state.withLock { $0.state = newState }
        continuation.yield(.stateChanged(newState, reason))
    }

    func publish(_ progress: DownloadProgress) {
        state.withLock { $0.progress = progress }
        continuation.yield(.progress(progress))
    }

    func setResumeData(_ data: Data?) {
        state.withLock { $0.resumeData = data }
    }

    /// Records the end and wakes every waiter. Only the first call counts.
    func finish(_ outcome: Result<DownloadResult, DownloadError>) {
        let waiters: [CheckedContinuation<Result<DownloadResult, DownloadError>, Never>]? = state.withLock { state in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            let waiters = state.waiters
            state.waiters = []
            return waiters
        }
        guard let waiters else { return }
        switch outcome {
        case .success(let result): continuation.yield(.finished(result))
        case .failure(let error): continuation.yield(.failed(error))
        }
        continuation.finish()
        for waiter in waiters { waiter.resume(returning: outcome) }
    }

    /// Waits for the end.
    func wait() async -> Result<DownloadResult, DownloadError> {
        await withCheckedContinuation { continuation in
            let ready: Result<DownloadResult, DownloadError>? = state.withLock { state in
                if let outcome = state.outcome { return outcome }
                state.waiters.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
