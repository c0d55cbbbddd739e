/// A segment as planned or resumed, before a ``SegmentBoardState`` gives it a handle: `[start, end)` with
/// `written` bytes credited from `start`. The static functions are the rules that make plans: a fresh
/// split, and the recovery of a saved map merged with the byte ranges a progress journal proves.
package struct SegmentPlan: Sendable, Hashable {
    package var start: Int64
    package var end: Int64
    package var written: Int64

    /// A segment `[start, end)` with `written` bytes credited from `start`.
    package init(start: Int64, end: Int64, written: Int64) {
        self.start = start
        self.end = end
        self.written = written
    }

    /// Splits `[from, total)` into `count` nearly equal segments, each at least `minimumSegmentSize`, the
    /// inner boundaries rounded down to multiples of `alignment` (piece checksums: one piece, one segment).
    package static func split(
        from: Int64, total: Int64, count: Int, minimumSegmentSize: Int64, alignment: Int64 = 1
    ) -> [SegmentPlan] {
        let length = total - from
        guard length > 0 else { return [] }
        let pieces = Int(max(1, min(Int64(count), length / max(1, minimumSegmentSize))))
        let size = length / Int64(pieces)
        let step = max(1, alignment)
        var starts = (0..<pieces).map { index in index == 0 ? from : max(from, (from + Int64(index) * size) / step * step) }
        starts = starts.enumerated().filter { $0.offset == 0 || $0.element > starts[$0.offset - 1] }.map(\.element)
        return starts.indices.map { index in
            SegmentPlan(start: starts[index], end: index + 1 < starts.count ? starts[index + 1] : total, written: 0)
        }
    }

    // MARK: - Resuming

    /// Turns a saved map (and byte ranges the progress journal proves were written) into plans covering
    /// `[0, total)` exactly (``covering(_:fileSize:total:)``). nil when the saved map overlaps itself or
    /// runs past the total (unusable: restart).
    package static func recover(
        saved: [some SavedSegment], journal: [Range<Int64>] = [], fileSize: Int64, total: Int64
    ) -> [SegmentPlan]? {
        guard let runs = writtenRuns(of: saved, total: total) else { return nil }
        return covering(runs + journal, fileSize: fileSize, total: total)
    }

    /// The written prefix of each segment of a saved map (an unknown end is the total's), or nil when
    /// the map overlaps itself or runs past the total.
    package static func writtenRuns(of saved: [some SavedSegment], total: Int64) -> [Range<Int64>]? {
        var previousEnd: Int64 = 0
        var runs: [Range<Int64>] = []
        for segment in saved.sorted(by: { $0.start < $1.start }) {
            let end = segment.end ?? total
            guard segment.start >= previousEnd, end <= total, end > segment.start else { return nil }
            previousEnd = end
            let written = max(0, min(segment.written, end - segment.start))
            runs.append(segment.start..<segment.start + written)
        }
        return runs
    }

    /// Plans covering `[0, total)` exactly whose written prefixes are `runs` (in any order, overlapping
    /// or not). Nothing beyond `fileSize` is trusted (the file is the limit of every claim): the runs are
    /// clipped to it and merged, and each merged run becomes a segment's written prefix up to the next run.
    package static func covering(_ runs: [Range<Int64>], fileSize: Int64, total: Int64) -> [SegmentPlan] {
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
        var plans: [SegmentPlan] = []
        var position: Int64 = 0
        for (index, run) in merged.enumerated() {
            if run.lowerBound > position {
                plans.append(SegmentPlan(start: position, end: run.lowerBound, written: 0))
            }
            let end = index + 1 < merged.count ? merged[index + 1].lowerBound : total
            plans.append(SegmentPlan(start: run.lowerBound, end: end, written: run.upperBound - run.lowerBound))
            position = end
        }
        if position < total { plans.append(SegmentPlan(start: position, end: total, written: 0)) }
        return plans
    }

    /// `runs` without the bytes of `removed` (both sorted or not; the result is sorted).
    package static func subtract(_ removed: [Range<Int64>], from runs: [Range<Int64>]) -> [Range<Int64>] {
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

    /// Bytes contiguous from offset 0 in a saved segment map: up to the first segment that is not fully
    /// written (or whose end is unknown), or the first gap.
    package static func contiguousPrefix(_ segments: [some SavedSegment]) -> Int64 {
        var position: Int64 = 0
        for segment in segments.sorted(by: { $0.start < $1.start }) {
            guard segment.start == position else { break }
            position = segment.start + segment.written
            guard let end = segment.end, segment.written >= end - segment.start else { break }
        }
        return position
    }
}

/// One segment of a saved map, as the caller records it (DownloadKit's `ResumeSegment`): `written` bytes
/// credited from `start`, and its exclusive end, nil while unknown.
package protocol SavedSegment {
    var start: Int64 { get }
    var end: Int64? { get }
    var written: Int64 { get }
}

/// The resume info's segments are the saved maps the board's plans are recovered from. (Declared here, not
/// beside `ResumeSegment`, so that the fuzz binary can compile that file with the resume-info decoders alone.)
extension ResumeSegment: SavedSegment {}
