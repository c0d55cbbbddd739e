/// The sources of a download with mirrors (docs/MIRRORS.md), as a value: which source a segment worker
/// uses, whether a source agrees with the first, when it is dropped. Events in (a worker wants a source,
/// a source answered with these validators, a sample compared, a source failed, bytes served over so many
/// seconds), decisions out. No locks, no I/O, no clock: DownloadKit's `SourceBoard` wraps it in a lock, and
/// `SourceSchedulerTests` drives it as a table.
///
/// `Reason` is the caller's reason a source is dropped (DownloadKit's `SourceDropReason`): the caller
/// gives it when a source fails (``failed(_:_:)``), and the scheduler makes one from the
/// ``SourceMismatch`` it finds in an answer or a sample (``SourceDropCause``).
///
/// The agreement rule: the first source's probe fixes the resource (total length, `Last-Modified`). A
/// mirror's answer joins when it is a 206 whose total equals that length and either
/// - both send `Last-Modified` and the values are equal, or
/// - either sends none: then a sample of ``sampleSize`` bytes it serves must equal bytes already written
///   from the agreeing sources (``Verdict/needsSample``).
/// A different `ETag` alone never excludes a mirror (each server computes its own), nor does an equal one
/// admit it. A different length or `Last-Modified`, a 200 (no ranges) or a different sample drops it.
/// Every later answer of a mirror is checked again (length, `Last-Modified`), so a mirror that changes
/// mid-download is dropped before any of its new bytes are written.
package struct SourceScheduler<Reason: SourceDropCause>: Sendable {
    /// What the first source's probe fixed.
    package struct Reference: Sendable, Hashable {
        package var total: Int64
        package var lastModified: String?

        /// The resource the first source's probe described: its total length and `Last-Modified`.
        package init(total: Int64, lastModified: String?) {
            self.total = total
            self.lastModified = lastModified
        }
    }

    /// Where a source is.
    package enum Phase: Sendable, Hashable {
        /// Not yet proved to serve the same resource (mirrors only): one connection at most.
        case probing
        /// Its answers agree on the length, but `Last-Modified` cannot tell: one connection, which fetches
        /// a sample (``Verdict/needsSample``) before any of its bytes are written.
        case sampling
        /// Proved by a sample; later answers are checked for length and `Last-Modified`.
        case agreeing
        case dropped(Reason)
    }

    /// One source's phase and what it served.
    package struct Source: Sendable, Hashable {
        package var phase: Phase
        /// Workers using it now.
        package var connections = 0
        /// Bytes credited from it in this run.
        package var bytes: Int64 = 0
        /// Seconds its responses took (head to end), for its speed.
        package var seconds = 0.0
        /// It sent a piece that failed its checksum (``PieceVerifier``): one connection at most, chosen last.
        package var demoted = false

        package var isLive: Bool {
            if case .dropped = phase { return false }
            return true
        }
        /// Bytes per second measured so far (0 before its first response ended).
        package var speed: Double { seconds > 0 ? Double(bytes) / seconds : 0 }
    }

    /// What an answer means for its source.
    package enum Verdict: Sendable, Hashable {
        /// Write its body.
        case agree
        /// Compare a sample first (``sampled(_:range:equal:)``); write nothing from it until then.
        case needsSample
        /// The source is dropped for this reason (published once, ``takeDrops()``).
        case drop(Reason)
    }

    /// The bytes a mirror without a comparable `Last-Modified` must serve identically before it joins.
    package static var sampleSize: Int64 { 64 << 10 }

    package let reference: Reference
    /// Connections one agreeing source may hold at once.
    package let perSource: Int
    package private(set) var sources: [Source]
    /// Drops not yet published, in order.
    private var drops: [(index: Int, reason: Reason)] = []

    /// `count` sources, the first of which (index 0) fixed `reference`.
    package init(count: Int, reference: Reference, perSource: Int) {
        self.reference = reference
        self.perSource = max(1, perSource)
        sources = (0..<max(1, count)).map { $0 == 0 ? Source(phase: .agreeing) : Source(phase: .probing) }
    }

    // MARK: - Events

    /// A source for a worker that has none: the live source with a free connection (a probing or demoted
    /// one has one at most) holding the fewest connections, a demoted one last; among those the fastest,
    /// then the first listed. nil when every live source is full (or none is left): the worker leaves.
    package mutating func assign() -> Int? {
        let open = sources.indices.filter { index in
            let source = sources[index]
            guard source.isLive else { return false }
            return source.connections < (source.phase == .agreeing && !source.demoted ? perSource : 1)
        }
        guard
            let best = open.min(by: { a, b in
                let (x, y) = (sources[a], sources[b])
                if x.demoted != y.demoted { return !x.demoted }
                if x.connections != y.connections { return x.connections < y.connections }
                if x.speed != y.speed { return x.speed > y.speed }
                return a < b
            })
        else { return nil }
        sources[best].connections += 1
        return best
    }

    /// A worker stops using `index`.
    package mutating func release(_ index: Int) {
        guard sources.indices.contains(index) else { return }
        sources[index].connections = max(0, sources[index].connections - 1)
    }

    /// A response head from source `index`: its status, the total length it gives (a 206's
    /// `Content-Range` total, a 200's `Content-Length`) and its `Last-Modified`. The first source's
    /// answers are the ``RangeResponsePolicy``'s to judge (they always agree here).
    package mutating func answered(_ index: Int, status: Int, total: Int64?, lastModified: String?) -> Verdict {
        guard sources.indices.contains(index) else { return .drop(Reason(.noRangeSupport(status: status))) }
        if case .dropped(let reason) = sources[index].phase { return .drop(reason) }
        guard index != 0 else { return .agree }
        if let total, total != reference.total {
            return drop(index, Reason(.differentLength(expected: reference.total, got: total)))
        }
        if let expected = reference.lastModified, let lastModified, expected != lastModified {
            return drop(index, Reason(.differentLastModified(expected: expected, got: lastModified)))
        }
        guard status == 206 else { return drop(index, Reason(.noRangeSupport(status: status))) }
        guard total != nil else { return drop(index, Reason(.differentLength(expected: reference.total, got: nil))) }
        if sources[index].phase == .agreeing { return .agree }
        if reference.lastModified != nil && lastModified != nil {
            sources[index].phase = .agreeing
            return .agree
        }
        sources[index].phase = .sampling
        return .needsSample
    }

    /// The sample source `index` served for `range` was compared with the file's bytes there.
    package mutating func sampled(_ index: Int, range: Range<Int64>, equal: Bool) -> Verdict {
        guard sources.indices.contains(index), sources[index].isLive else { return .drop(Reason(.differentBytes(range))) }
        guard equal else { return drop(index, Reason(.differentBytes(range))) }
        sources[index].phase = .agreeing
        return .agree
    }

    /// Source `index` failed past its retries, or was too slow. Returns whether any source is left.
    package mutating func failed(_ index: Int, _ reason: Reason) -> Bool {
        if sources.indices.contains(index), sources[index].isLive { _ = drop(index, reason) }
        return hasLiveSource
    }

    /// Source `index` sent a bad piece (``PieceVerifier/Decision/demote``).
    package mutating func demote(_ index: Int) {
        if sources.indices.contains(index) { sources[index].demoted = true }
    }

    /// The sources a piece may be fetched again from: live and agreeing, in order.
    package var agreeing: [Int] { sources.indices.filter { sources[$0].phase == .agreeing } }

    /// Whether a source other than `index` is live and agreeing: a sample of `index` may still find bytes
    /// to compare with once it writes some.
    package func hasAgreeingSource(besides index: Int) -> Bool {
        sources.indices.contains { $0 != index && sources[$0].phase == .agreeing }
    }

    /// Whether a too-slow source is dropped (another live source is left) rather than retried.
    package func dropsWhenSlow(_ index: Int) -> Bool {
        sources.indices.contains { $0 != index && sources[$0].isLive }
    }

    /// Source `index` served `bytes` (credited) over `seconds` of its responses.
    package mutating func served(_ index: Int, bytes: Int64, seconds: Double) {
        guard sources.indices.contains(index) else { return }
        sources[index].bytes += bytes
        sources[index].seconds += max(0, seconds)
    }

    /// The drops decided since the last call, in order, for the events.
    package mutating func takeDrops() -> [(index: Int, reason: Reason)] {
        defer { drops = [] }
        return drops
    }

    private mutating func drop(_ index: Int, _ reason: Reason) -> Verdict {
        sources[index].phase = .dropped(reason)
        drops.append((index, reason))
        return .drop(reason)
    }

    // MARK: - Views

    package var hasLiveSource: Bool { sources.contains(where: \.isLive) }

    package func isLive(_ index: Int) -> Bool { sources.indices.contains(index) && sources[index].isLive }

    /// Connections the sources can hold at once when every mirror agrees.
    package var capacity: Int { sources.count * perSource }

    /// The reason source `index` was dropped, if it was.
    package func dropReason(_ index: Int) -> Reason? {
        if case .dropped(let reason) = sources[index].phase { return reason }
        return nil
    }
}

/// What the scheduler finds wrong with a mirror's answer or sample (the agreement rule of
/// ``SourceScheduler``).
package enum SourceMismatch: Sendable, Hashable {
    /// Its total length differs from the first source's (nil: it gave none).
    case differentLength(expected: Int64, got: Int64?)
    /// Both send `Last-Modified` and the values differ.
    case differentLastModified(expected: String, got: String)
    /// The sample it served for this range differs from the bytes already written there.
    case differentBytes(Range<Int64>)
    /// It answered a range request with this status instead of a 206.
    case noRangeSupport(status: Int)
}

/// A caller's reason a source was dropped, which can name a ``SourceMismatch`` the scheduler found.
package protocol SourceDropCause: Sendable, Hashable {
    /// The reason for `mismatch`.
    init(_ mismatch: SourceMismatch)
}
