import DownloadKitDecisions
import HTTPClient
import HTTPWire

/// Where one source's requests go: its URL and its header fields (credentials only for the first
/// source's origin).
struct DownloadSource: Sendable {
    let url: HTTPURL
    let headers: DKHTTPHeaders
}

/// ``SourceScheduler`` shared by the segment worker threads of a download with mirrors: every event
/// takes the one lock once and applies the scheduler's rule (per response head, per credited buffer,
/// never per byte). No decision lives here.
final class SourceBoard: Sendable {
    /// The scheduler's rules with DownloadKit's drop reasons.
    typealias Scheduler = SourceScheduler<SourceDropReason>

    /// In the request's order; index 0 fixed the resource.
    let sources: [DownloadSource]
    private let state: LockedValue<Scheduler>
    /// Told of every drop, so the coordinator announces it without polling.
    private let wakes: SegmentWakes?

    init(_ sources: [DownloadSource], reference: Scheduler.Reference, perSource: Int, wakes: SegmentWakes? = nil) {
        self.sources = sources
        state = LockedValue(Scheduler(count: sources.count, reference: reference, perSource: perSource))
        self.wakes = wakes
    }

    func assign() -> Int? { state.withLock { $0.assign() } }
    func release(_ index: Int) { state.withLock { $0.release(index) } }

    func answered(_ index: Int, status: Int, total: Int64?, lastModified: String?) -> Scheduler.Verdict {
        announced(state.withLock { $0.answered(index, status: status, total: total, lastModified: lastModified) })
    }

    func sampled(_ index: Int, range: Range<Int64>, equal: Bool) -> Scheduler.Verdict {
        announced(state.withLock { $0.sampled(index, range: range, equal: equal) })
    }

    /// Drops `index`; returns whether any source is left.
    func failed(_ index: Int, _ reason: SourceDropReason) -> Bool {
        defer { wakes?.sourceDropped() }
        return state.withLock { $0.failed(index, reason) }
    }

    /// `verdict`, after waking the coordinator when it dropped the source.
    private func announced(_ verdict: Scheduler.Verdict) -> Scheduler.Verdict {
        if case .drop = verdict { wakes?.sourceDropped() }
        return verdict
    }
    func hasAgreeingSource(besides index: Int) -> Bool { state.withLock { $0.hasAgreeingSource(besides: index) } }
    func dropsWhenSlow(_ index: Int) -> Bool { state.withLock { $0.dropsWhenSlow(index) } }
    func served(_ index: Int, bytes: Int64, seconds: Double) {
        state.withLock { $0.served(index, bytes: bytes, seconds: seconds) }
    }
    func demote(_ index: Int) { state.withLock { $0.demote(index) } }
    var agreeing: [Int] { state.withLock { $0.agreeing } }
    func takeDrops() -> [(index: Int, reason: SourceDropReason)] { state.withLock { $0.takeDrops() } }
    func isLive(_ index: Int) -> Bool { state.withLock { $0.isLive(index) } }
    func phase(_ index: Int) -> Scheduler.Phase { state.withLock { $0.sources[index].phase } }
    var capacity: Int { state.withLock { $0.capacity } }

    /// What each source gave, for the result.
    func usage() -> [SourceUsage] {
        let scheduler = state.withLock { $0 }
        return sources.indices.map { index in
            SourceUsage(
                url: sources[index].url.listingDescription, bytes: scheduler.sources[index].bytes,
                dropReason: scheduler.dropReason(index))
        }
    }
}

extension SourceDropReason: SourceDropCause {
    /// The public reason for a mismatch the scheduler found (the same case, by name).
    package init(_ mismatch: SourceMismatch) {
        switch mismatch {
        case .differentLength(let expected, let got): self = .differentLength(expected: expected, got: got)
        case .differentLastModified(let expected, let got): self = .differentLastModified(expected: expected, got: got)
        case .differentBytes(let range): self = .differentBytes(range)
        case .noRangeSupport(let status): self = .noRangeSupport(status: status)
        }
    }
}
