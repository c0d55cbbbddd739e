import DownloadKitDecisions

/// The rules of a segmented download's shared segment map, as a value: events in (take, beginRequest,
/// continueRequest, claim, record, release, steal, stop, restart), decisions out. No locks, no I/O, no clocks — the
/// locked ``SegmentBoard`` wraps it for threads, and the schedule tests drive it directly.
///
/// Invariants it keeps (issue #22):
/// - A worker names its segment by a ``SegmentHandle`` it got from ``take(worker:)``; nothing is ever
///   looked up by byte position, so a steal can never hand one worker's bytes to another's segment.
/// - Claim-then-write: before writing, the owner claims `[position, position + n)` of its own segment;
///   a steal never cuts below a claimed byte or below the claim's end, and the owner credits at most
///   what it claimed, so `written` only ever covers bytes that were written first.
/// - Segments tile `[0, total)` without overlap; ``proveCoverage(total:)`` checks that every byte is
///   credited exactly once before the file may be moved into place.
struct SegmentBoardState: Sendable {
    /// One contiguous byte range of the file and how far it has been written.
    struct Segment: Sendable, Equatable {
        /// The segment's identity; stable while it lives, never reused within a board.
        let handle: SegmentHandle
        var start: Int64
        /// Exclusive end; may shrink when another worker steals the tail.
        var end: Int64
        /// Bytes credited from `start` (written to the file first, then recorded).
        var written: Int64
        var owner: Int?
        /// End of the owner's request in flight (`position` when none): a sparing steal never cuts
        /// below it, so the owner's connection is kept.
        var requestedEnd: Int64
        /// End of the bytes the owner claimed and is writing (`position` when none): no steal cuts below it.
        var claimedEnd: Int64

        var position: Int64 { start + written }
        var remaining: Int64 { end - position }
    }

    /// Why the transfer stopped early.
    enum Stop: Sendable {
        case failed(DownloadError)
        case restart(RestartReason)
        /// A segment request got 401/403/404/410: ask the URL provider, then continue (issue #13, 8).
        case refreshURL(status: Int)
        case stopped
    }

    /// What ``take(worker:)`` hands out: the segment and where its owner starts.
    struct Assignment: Sendable, Equatable {
        let handle: SegmentHandle
        let position: Int64
        let end: Int64
    }

    private(set) var segments: [Segment]
    private(set) var stopReason: Stop?
    /// Workers holding a segment.
    private(set) var active = 0
    /// Bytes credited through ``record(_:worker:at:count:)`` since the board was built or restarted.
    private(set) var creditedThisRun: Int64 = 0
    /// Bytes the board started with (from a resumed map).
    private(set) var creditedAtStart: Int64
    /// Bumped by ``restart(segments:)``: handles of an earlier generation are refused.
    private(set) var generation: Int
    private var nextIndex = 0
    /// A stolen tail is never smaller than this.
    let minimumSplit: Int64
    /// Split points are multiples of this (64 KiB in production; small in the schedule tests).
    let alignment: Int64

    /// A segment as planned or resumed, before it has a handle.
    struct Plan: Sendable, Equatable {
        var start: Int64
        var end: Int64
        var written: Int64
    }

    init(plans: [Plan], minimumSegmentSize: Int64, alignment: Int64 = 64 << 10, generation: Int = 0) {
        self.alignment = max(1, alignment)
        minimumSplit = max(self.alignment, minimumSegmentSize)
        self.generation = generation
        segments = []
        creditedAtStart = 0
        install(plans)
    }

    private mutating func install(_ plans: [Plan]) {
        segments = plans.sorted { $0.start < $1.start }.map { plan in
            defer { nextIndex += 1 }
            let position = plan.start + plan.written
            return Segment(
                handle: SegmentHandle(generation: generation, index: nextIndex), start: plan.start, end: plan.end,
                written: plan.written, owner: nil, requestedEnd: position, claimedEnd: position)
        }
        creditedAtStart = segments.reduce(0) { $0 + $1.written }
        creditedThisRun = 0
        active = 0
        stopReason = nil
    }

    /// Splits `[from, total)` into `count` nearly equal segments, each at least `minimumSegmentSize`, the
    /// inner boundaries rounded down to multiples of `alignment` (piece checksums: one piece, one segment).
    static func plan(from: Int64, total: Int64, count: Int, minimumSegmentSize: Int64, alignment: Int64 = 1) -> [Plan] {
        let length = total - from
        guard length > 0 else { return [] }
        let pieces = Int(max(1, min(Int64(count), length / max(1, minimumSegmentSize))))
        let size = length / Int64(pieces)
        let step = max(1, alignment)
        var starts = (0..<pieces).map { index in index == 0 ? from : max(from, (from + Int64(index) * size) / step * step) }
        starts = starts.enumerated().filter { $0.offset == 0 || $0.element > starts[$0.offset - 1] }.map(\.element)
        return starts.indices.map { index in
            Plan(start: starts[index], end: index + 1 < starts.count ? starts[index + 1] : total, written: 0)
        }
    }

    private func index(of handle: SegmentHandle, worker: Int) -> Int? {
        guard handle.generation == generation,
            let index = segments.firstIndex(where: { $0.handle == handle }),
            segments[index].owner == worker
        else { return nil }
        return index
    }

    // MARK: - Events

    /// Gives `worker` a segment: an unowned one with bytes left, else the second half of the largest
    /// remainder of an owned one (work stealing), else nil (stopped, or nothing left worth splitting).
    mutating func take(worker: Int) -> Assignment? {
        if stopReason != nil { return nil }
        if let index = segments.indices.first(where: { segments[$0].owner == nil && segments[$0].remaining > 0 }) {
            segments[index].owner = worker
            segments[index].requestedEnd = segments[index].position
            segments[index].claimedEnd = segments[index].position
            active += 1
            let segment = segments[index]
            return Assignment(handle: segment.handle, position: segment.position, end: segment.end)
        }
        return steal(worker: worker)
    }

    /// Where a thief may split `segment`: half of what is left above the claimed bytes (and, when
    /// `sparingTheRequest`, above the request in flight), aligned; nil when the stolen part would be
    /// below the minimum.
    func splitPoint(of segment: Segment, sparingTheRequest: Bool) -> Int64? {
        let floor = max(segment.position, segment.claimedEnd)
        let from = sparingTheRequest ? max(floor, segment.requestedEnd) : floor
        var middle = from + (segment.end - from) / 2
        middle = (middle + alignment - 1) / alignment * alignment
        guard middle > from, segment.end - middle >= minimumSplit else { return nil }
        return middle
    }

    /// Steals the second half of what the busiest owner has not requested yet; failing that (a request in
    /// flight covers all of it: a stalled connection holding its last request), cuts into the request
    /// above the claimed bytes, which costs the owner its connection when it reaches the new end.
    private mutating func steal(worker: Int) -> Assignment? {
        func candidates(sparingTheRequest: Bool) -> [(index: Int, middle: Int64)] {
            segments.indices.compactMap { index -> (index: Int, middle: Int64)? in
                guard segments[index].owner != nil,
                    let middle = splitPoint(of: segments[index], sparingTheRequest: sparingTheRequest)
                else { return nil }
                return (index, middle)
            }
        }
        var choices = candidates(sparingTheRequest: true)
        if choices.isEmpty { choices = candidates(sparingTheRequest: false) }
        guard let (victim, middle) = choices.max(by: { segments[$0.index].end - $0.middle < segments[$1.index].end - $1.middle })
        else { return nil }
        let oldEnd = segments[victim].end
        segments[victim].end = middle
        segments[victim].requestedEnd = min(segments[victim].requestedEnd, middle)
        let stolen = Segment(
            handle: SegmentHandle(generation: generation, index: nextIndex), start: middle, end: oldEnd, written: 0,
            owner: worker, requestedEnd: middle, claimedEnd: middle)
        nextIndex += 1
        segments.insert(stolen, at: victim + 1)
        active += 1
        return Assignment(handle: stolen.handle, position: middle, end: oldEnd)
    }

    /// Marks a request from the segment's position of at most `maximum` bytes as in flight; returns the
    /// range to ask for, or nil when the segment has nothing left (or is not the worker's, or stopped).
    mutating func beginRequest(_ handle: SegmentHandle, worker: Int, maximum: Int64) -> Range<Int64>? {
        guard stopReason == nil, let index = index(of: handle, worker: worker) else { return nil }
        let segment = segments[index]
        guard segment.remaining > 0 else { return nil }
        let end = min(segment.end, segment.position + maximum)
        segments[index].requestedEnd = end
        return segment.position..<end
    }

    /// Marks the next request on the owner's connection as in flight: at most `maximum` bytes from where
    /// the requests in flight end (sent ahead, so its response follows the current one without a round
    /// trip). Returns the range to ask for, or nil when requests already cover the rest of the segment
    /// (a steal may have cut it), or the segment is not the worker's, or the board stopped.
    mutating func continueRequest(_ handle: SegmentHandle, worker: Int, maximum: Int64) -> Range<Int64>? {
        guard stopReason == nil, let index = index(of: handle, worker: worker) else { return nil }
        let segment = segments[index]
        let from = max(segment.position, segment.requestedEnd)
        guard from < segment.end else { return nil }
        let end = min(segment.end, from + maximum)
        segments[index].requestedEnd = end
        return from..<end
    }

    /// Claims up to `count` bytes at `position` (the response stream's offset) for writing. Returns how
    /// many may be written there: 0 when the segment ends at `position`, the position is not the
    /// segment's, a claim is already open, or the board stopped. Fewer than `count` means the segment
    /// shrank inside this buffer: write those, then drop the response.
    mutating func claim(_ handle: SegmentHandle, worker: Int, at position: Int64, count: Int) -> Int {
        guard stopReason == nil, let index = index(of: handle, worker: worker) else { return 0 }
        let segment = segments[index]
        guard segment.position == position, segment.claimedEnd == position, count > 0 else { return 0 }
        let allowed = min(Int64(count), segment.remaining)
        guard allowed > 0 else { return 0 }
        segments[index].claimedEnd = position + allowed
        return Int(allowed)
    }

    /// Credits `count` bytes written at `position` under the open claim (at most the claim; fewer after a
    /// short write) and closes the claim. Returns the credited range (empty when refused) and whether
    /// the segment wants more.
    mutating func record(_ handle: SegmentHandle, worker: Int, at position: Int64, count: Int) -> (
        credited: Range<Int64>, wantsMore: Bool
    ) {
        guard let index = index(of: handle, worker: worker), segments[index].position == position else {
            return (position..<position, false)
        }
        let accepted = max(0, min(Int64(count), segments[index].claimedEnd - position))
        segments[index].written += accepted
        segments[index].claimedEnd = segments[index].position
        creditedThisRun += accepted
        let segment = segments[index]
        return (position..<position + accepted, segment.remaining > 0 && stopReason == nil)
    }

    /// Bytes the owner's segment still lacks (0 when not the worker's, or stopped).
    func remaining(_ handle: SegmentHandle, worker: Int) -> Int64 {
        guard stopReason == nil, let index = index(of: handle, worker: worker) else { return 0 }
        return segments[index].remaining
    }

    /// Gives a segment back (finished, or its worker is leaving). An open claim is dropped.
    mutating func release(_ handle: SegmentHandle, worker: Int) {
        guard let index = index(of: handle, worker: worker) else { return }
        segments[index].owner = nil
        segments[index].claimedEnd = segments[index].position
        segments[index].requestedEnd = segments[index].position
        active -= 1
    }

    /// Stops every worker; the first reason wins.
    mutating func stop(_ reason: Stop) {
        if stopReason == nil { stopReason = reason }
    }

    /// Starts over with new segments (the old version of the file is gone): handles of the old
    /// generation are refused from now on.
    mutating func restart(segments plans: [Plan]) {
        generation += 1
        install(plans)
    }

    // MARK: - Views

    var written: Int64 { segments.reduce(0) { $0 + $1.written } }
    var isComplete: Bool { segments.allSatisfy { $0.remaining == 0 } }

    /// The map for the resume info: only credited bytes, which were written before they were credited.
    func snapshot() -> [ResumeSegment] {
        segments.map { ResumeSegment(start: $0.start, end: $0.end, written: $0.written) }
    }

    /// The accounting pass before the final rename: the segments tile `[0, total)` without gap or
    /// overlap, each is fully credited, and the credits add up (what the board started with plus what
    /// was recorded since) to exactly `total` — every byte credited exactly once.
    func proveCoverage(total: Int64) throws(DownloadError) {
        var position: Int64 = 0
        for segment in segments {
            guard segment.start == position, segment.end >= segment.start else {
                throw DownloadError(
                    .segmentAccounting,
                    "segment accounting failed: a segment starts at \(segment.start), expected \(position) (gap or overlap)")
            }
            guard segment.written == segment.end - segment.start else {
                throw DownloadError(
                    .segmentAccounting,
                    "segment accounting failed: bytes \(segment.position)..<\(segment.end) were never credited")
            }
            position = segment.end
        }
        guard position == total else {
            throw DownloadError(
                .segmentAccounting, "segment accounting failed: the segments cover \(position) of \(total) bytes")
        }
        guard creditedAtStart + creditedThisRun == total else {
            throw DownloadError(
                .segmentAccounting,
                "segment accounting failed: \(creditedAtStart) bytes resumed + \(creditedThisRun) credited ≠ \(total)")
        }
    }

    // MARK: - Resuming

    /// Turns a saved map (and byte ranges the progress journal proves were written) into plans covering
    /// `[0, total)` exactly. Nothing beyond `fileSize` is trusted (the file is the limit of every claim);
    /// the saved map's written prefixes and the journal ranges are merged, and each merged run becomes a
    /// segment's written prefix up to the next run. nil when the saved map overlaps itself or runs past
    /// the total (unusable: restart).
    static func recover(saved: [ResumeSegment], journal: [Range<Int64>] = [], fileSize: Int64, total: Int64) -> [Plan]? {
        var previousEnd: Int64 = 0
        var runs: [Range<Int64>] = []
        for segment in saved.sorted(by: { $0.start < $1.start }) {
            let end = segment.end ?? total
            guard segment.start >= previousEnd, end <= total, end > segment.start else { return nil }
            previousEnd = end
            let written = max(0, min(segment.written, end - segment.start))
            runs.append(segment.start..<segment.start + written)
        }
        runs += journal
        let limit = min(fileSize, total)
        let clipped = runs.compactMap { run -> Range<Int64>? in
            let lower = max(0, run.lowerBound)
            let upper = min(limit, run.upperBound)
            return lower < upper ? lower..<upper : nil
        }.sorted { $0.lowerBound < $1.lowerBound }
        var merged: [Range<Int64>] = []
        for run in clipped {
            if let last = merged.last, run.lowerBound <= last.upperBound {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, run.upperBound)
            } else {
                merged.append(run)
            }
        }
        var plans: [Plan] = []
        var position: Int64 = 0
        for (index, run) in merged.enumerated() {
            if run.lowerBound > position {
                plans.append(Plan(start: position, end: run.lowerBound, written: 0))
            }
            let end = index + 1 < merged.count ? merged[index + 1].lowerBound : total
            plans.append(Plan(start: run.lowerBound, end: end, written: run.upperBound - run.lowerBound))
            position = end
        }
        if position < total { plans.append(Plan(start: position, end: total, written: 0)) }
        return plans
    }

    /// `runs` without the bytes of `removed` (both sorted or not; the result is sorted).
    static func subtract(_ removed: [Range<Int64>], from runs: [Range<Int64>]) -> [Range<Int64>] {
        var result = runs.sorted { $0.lowerBound < $1.lowerBound }
        for cut in removed {
            result = result.flatMap { run -> [Range<Int64>] in
                guard run.overlaps(cut) else { return [run] }
                return [run.lowerBound..<max(run.lowerBound, cut.lowerBound), min(run.upperBound, cut.upperBound)..<run.upperBound]
                    .filter { !$0.isEmpty }
            }
        }
        return result
    }

    /// Bytes contiguous from offset 0 in a segment map.
    static func contiguousPrefix(_ segments: [ResumeSegment]) -> Int64 {
        var position: Int64 = 0
        for segment in segments.sorted(by: { $0.start < $1.start }) {
            guard segment.start == position else { break }
            position = segment.start + segment.written
            guard let end = segment.end, segment.written >= end - segment.start else { break }
        }
        return position
    }
}

/// A worker's name for its segment: which board generation, which segment of it.
struct SegmentHandle: Hashable, Sendable {
    let generation: Int
    let index: Int
}
