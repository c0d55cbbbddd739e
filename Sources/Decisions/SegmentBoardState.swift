/// The rules of a segmented download's shared segment map, as a value: events in (take, beginRequest,
/// continueRequest, claim, record, release, steal, stop, restart), decisions out. No locks, no I/O, no clocks — the
/// locked `SegmentBoard` (DownloadKit) wraps it for threads, and `SegmentBoardStateTests` and the schedule
/// exploration drive it directly.
///
/// `Failure` is the caller's error, carried by ``Stop/failed(_:)`` and never read here; the board's own
/// failure, an accounting gap, is a value (``CoverageGap``).
///
/// Invariants it keeps (issue #22):
/// - A worker names its segment by a ``SegmentHandle`` it got from ``take(worker:)``; nothing is ever
///   looked up by byte position, so a steal can never hand one worker's bytes to another's segment.
/// - Claim-then-write: before writing, the owner claims `[position, position + n)` of its own segment;
///   a steal never cuts below a claimed byte or below the claim's end, and the owner credits at most
///   what it claimed, so `written` only ever covers bytes that were written first.
/// - Segments tile `[0, total)` without overlap; ``coverageGap(total:)`` checks that every byte is
///   credited exactly once before the file may be moved into place.
package struct SegmentBoardState<Failure: Error & Sendable>: Sendable {
    /// One contiguous byte range of the file and how far it has been written.
    package struct Segment: Sendable, Equatable {
        /// The segment's identity; stable while it lives, never reused within a board.
        package let handle: SegmentHandle
        package var start: Int64
        /// Exclusive end; may shrink when another worker steals the tail.
        package var end: Int64
        /// Bytes credited from `start` (written to the file first, then recorded).
        package var written: Int64
        package var owner: Int?
        /// End of the owner's request in flight (`position` when none): a sparing steal never cuts
        /// below it, so the owner's connection is kept.
        package var requestedEnd: Int64
        /// End of the bytes the owner claimed and is writing (`position` when none): no steal cuts below it.
        package var claimedEnd: Int64

        package var position: Int64 { start + written }
        package var remaining: Int64 { end - position }
    }

    /// Why the transfer stopped early.
    package enum Stop: Sendable {
        /// A worker failed past its retries with the caller's error.
        case failed(Failure)
        case restart(RestartReason)
        /// A segment request got 401/403/404/410: ask the URL provider, then continue (issue #13, 8).
        case refreshURL(status: Int)
        case stopped
    }

    /// What ``take(worker:)`` hands out: the segment and where its owner starts.
    package struct Assignment: Sendable, Equatable {
        package let handle: SegmentHandle
        package let position: Int64
        package let end: Int64
    }

    package private(set) var segments: [Segment]
    package private(set) var stopReason: Stop?
    /// Workers holding a segment.
    package private(set) var active = 0
    /// Bytes credited through ``record(_:worker:at:count:)`` since the board was built or restarted.
    package private(set) var creditedThisRun: Int64 = 0
    /// Bytes the board started with (from a resumed map).
    package private(set) var creditedAtStart: Int64
    /// Bumped by ``restart(segments:)``: handles of an earlier generation are refused.
    package private(set) var generation: Int
    private var nextIndex = 0
    /// A stolen tail is never smaller than this.
    package let minimumSplit: Int64
    /// Split points are multiples of this (64 KiB in production; small in the schedule tests).
    package let alignment: Int64

    /// The board of `plans` (``SegmentPlan/split(from:total:count:minimumSegmentSize:alignment:)`` or
    /// ``SegmentPlan/recover(saved:journal:fileSize:total:)``); a stolen tail is at least
    /// `minimumSegmentSize` and at least `alignment`.
    package init(plans: [SegmentPlan], minimumSegmentSize: Int64, alignment: Int64 = 64 << 10, generation: Int = 0) {
        self.alignment = max(1, alignment)
        minimumSplit = max(self.alignment, minimumSegmentSize)
        self.generation = generation
        segments = []
        creditedAtStart = 0
        install(plans)
    }

    private mutating func install(_ plans: [SegmentPlan]) {
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
    package mutating func take(worker: Int) -> Assignment? {
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
    package func splitPoint(of segment: Segment, sparingTheRequest: Bool) -> Int64? {
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
    package mutating func beginRequest(_ handle: SegmentHandle, worker: Int, maximum: Int64) -> Range<Int64>? {
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
    package mutating func continueRequest(_ handle: SegmentHandle, worker: Int, maximum: Int64) -> Range<Int64>? {
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
    package mutating func claim(_ handle: SegmentHandle, worker: Int, at position: Int64, count: Int) -> Int {
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
    package mutating func record(_ handle: SegmentHandle, worker: Int, at position: Int64, count: Int) -> (
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
    package func remaining(_ handle: SegmentHandle, worker: Int) -> Int64 {
        guard stopReason == nil, let index = index(of: handle, worker: worker) else { return 0 }
        return segments[index].remaining
    }

    /// Gives a segment back (finished, or its worker is leaving). An open claim is dropped.
    package mutating func release(_ handle: SegmentHandle, worker: Int) {
        guard let index = index(of: handle, worker: worker) else { return }
        segments[index].owner = nil
        segments[index].claimedEnd = segments[index].position
        segments[index].requestedEnd = segments[index].position
        active -= 1
    }

    /// Stops every worker; the first reason wins.
    package mutating func stop(_ reason: Stop) {
        if stopReason == nil { stopReason = reason }
    }

    /// Starts over with new segments (the old version of the file is gone): handles of the old
    /// generation are refused from now on.
    package mutating func restart(segments plans: [SegmentPlan]) {
        generation += 1
        install(plans)
    }

    // MARK: - Views

    package var written: Int64 { segments.reduce(0) { $0 + $1.written } }
    package var isComplete: Bool { segments.allSatisfy { $0.remaining == 0 } }

    /// The map for the resume info: only credited bytes, which were written before they were credited.
    package func snapshot() -> [SegmentPlan] {
        segments.map { SegmentPlan(start: $0.start, end: $0.end, written: $0.written) }
    }

    /// The credited prefix of every segment that has one, in order: what the progress journal keeps and
    /// what the piece checks of a resumed download read back.
    package var creditedRuns: [Range<Int64>] {
        segments.compactMap { $0.written > 0 ? $0.start..<$0.position : nil }
    }

    /// The accounting pass before the final rename: the segments tile `[0, total)` without gap or
    /// overlap, each is fully credited, and the credits add up (what the board started with plus what
    /// was recorded since) to exactly `total` — every byte credited exactly once. Returns the first
    /// thing that does not add up, or nil when the file may be moved into place.
    package func coverageGap(total: Int64) -> CoverageGap? {
        var position: Int64 = 0
        for segment in segments {
            guard segment.start == position, segment.end >= segment.start else {
                return .misplacedSegment(start: segment.start, expected: position)
            }
            guard segment.written == segment.end - segment.start else {
                return .uncredited(segment.position..<segment.end)
            }
            position = segment.end
        }
        guard position == total else { return .shortOfTotal(covered: position, total: total) }
        guard creditedAtStart + creditedThisRun == total else {
            return .creditsDiffer(resumed: creditedAtStart, credited: creditedThisRun, total: total)
        }
        return nil
    }
}

extension SegmentBoardState.Stop: Equatable where Failure: Equatable {}

/// Why ``SegmentBoardState/coverageGap(total:)`` refuses to call a segmented file complete.
package enum CoverageGap: Sendable, Hashable {
    /// A segment starts at `start` where the one before it ended at `expected` (a gap or an overlap), or
    /// ends before it starts.
    case misplacedSegment(start: Int64, expected: Int64)
    /// These bytes of a segment were never credited.
    case uncredited(Range<Int64>)
    /// The segments end at `covered`, not at the file's `total`.
    case shortOfTotal(covered: Int64, total: Int64)
    /// The bytes the board resumed with plus those credited since are not `total`: a byte counted twice
    /// or never.
    case creditsDiffer(resumed: Int64, credited: Int64, total: Int64)
}

/// A worker's name for its segment: which board generation, which segment of it.
package struct SegmentHandle: Hashable, Sendable {
    package let generation: Int
    package let index: Int
}
