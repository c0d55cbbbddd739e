import DownloadKitDecisions
import HTTPClient

/// ``SegmentBoardState`` shared by the segment worker threads: every event takes the one lock once
/// (per received buffer, ≥ 64 KiB, never per byte) and applies the state's rule. No decision lives here.
final class SegmentBoard: Sendable {
    /// The board's rules with DownloadKit's error in ``SegmentBoardState/Stop/failed(_:)``.
    typealias State = SegmentBoardState<DownloadError>

    private let state: LockedValue<State>
    /// Woken when the board stops, so workers waiting out a retry delay or a rate limit see it at once.
    private let wakes: WakeSignal?

    init(_ state: State, wakes: WakeSignal? = nil) {
        self.state = LockedValue(state)
        self.wakes = wakes
    }

    func take(worker: Int) -> State.Assignment? { state.withLock { $0.take(worker: worker) } }

    func beginRequest(_ handle: SegmentHandle, worker: Int, maximum: Int64) -> Range<Int64>? {
        state.withLock { $0.beginRequest(handle, worker: worker, maximum: maximum) }
    }

    func continueRequest(_ handle: SegmentHandle, worker: Int, maximum: Int64) -> Range<Int64>? {
        state.withLock { $0.continueRequest(handle, worker: worker, maximum: maximum) }
    }

    func claim(_ handle: SegmentHandle, worker: Int, at position: Int64, count: Int) -> Int {
        state.withLock { $0.claim(handle, worker: worker, at: position, count: count) }
    }

    func record(_ handle: SegmentHandle, worker: Int, at position: Int64, count: Int) -> Range<Int64> {
        state.withLock { $0.record(handle, worker: worker, at: position, count: count).credited }
    }

    func remaining(_ handle: SegmentHandle, worker: Int) -> Int64 {
        state.withLock { $0.remaining(handle, worker: worker) }
    }

    func release(_ handle: SegmentHandle, worker: Int) { state.withLock { $0.release(handle, worker: worker) } }

    /// Stops every worker; the first reason wins.
    func stop(_ reason: State.Stop) {
        state.withLock { $0.stop(reason) }
        wakes?.wake()
    }

    var stopReason: State.Stop? { state.withLock { $0.stopReason } }
    var activeConnections: Int { state.withLock { $0.active } }
    var written: Int64 { state.withLock { $0.written } }
    var isComplete: Bool { state.withLock { $0.isComplete } }

    /// The map for the resume info. Taken before the data is synced, so it never claims more than what
    /// the sync that follows makes durable (every credited byte was written before it was credited).
    func snapshot() -> [ResumeSegment] {
        state.withLock { $0.snapshot() }.map { ResumeSegment(start: $0.start, end: $0.end, written: $0.written) }
    }

    /// The written prefix of every segment, for compacting the progress journal.
    func creditedRuns() -> [Range<Int64>] { state.withLock { $0.creditedRuns } }

    /// See ``SegmentBoardState/coverageGap(total:)``.
    func coverageGap(total: Int64) -> CoverageGap? { state.withLock { $0.coverageGap(total: total) } }
}


extension DownloadError {
    /// The failure of a segmented download whose accounting does not add up (``SegmentBoardState/coverageGap(total:)``):
    /// ``DownloadError/Code/segmentAccounting``, naming the offsets.
    init(_ gap: CoverageGap) {
        let detail =
            switch gap {
            case .misplacedSegment(let start, let expected): "a segment starts at \(start), expected \(expected) (gap or overlap)"
            case .uncredited(let bytes): "bytes \(bytes.lowerBound)..<\(bytes.upperBound) were never credited"
            case .shortOfTotal(let covered, let total): "the segments cover \(covered) of \(total) bytes"
            case .creditsDiffer(let resumed, let credited, let total):
                "\(resumed) bytes resumed + \(credited) credited ≠ \(total)"
            }
        self.init(.segmentAccounting, "segment accounting failed: \(detail)")
    }
}

/// The shortest wait any segment worker of one download measured (``SendAheadRule``): each worker folds
/// its own in and takes the result back.
final class SharedShortestWait: Sendable {
    private let shortest = LockedValue<Double?>(nil)

    init() {}

    /// Folds `wait` in and returns the shortest so far (nil while no worker measured one).
    func fold(_ wait: Double?) -> Double? {
        shortest.withLock { shortest in
            if let wait { shortest = min(shortest ?? wait, wait) }
            return shortest
        }
    }
}
