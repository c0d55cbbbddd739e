/// The piece checks of a download with piece checksums (``DownloadRequest/pieceChecksums``, docs/MIRRORS.md
/// "Piece checksums"), as a value: events in (bytes of a piece credited from a source, a piece checked good
/// or bad, a resumed piece checked from disk), decisions out (verified; fetch the piece again from this
/// source; demote or drop the sources that sent it; fail naming the piece). No locks, no I/O: ``PieceBoard``
/// wraps it for the segment workers, and `PieceVerifierTests` drives it as a table.
///
/// The rules:
/// - A piece is checked once all its bytes are credited (whatever segments and sources wrote them), by the
///   worker whose credit completed it: the state goes `open → checking`, so exactly one worker owns the check.
/// - A bad piece counts against every source that wrote bytes of it in this run (usually one: splits are
///   aligned to pieces) — against only those that already sent a bad piece, when some did. Such a source is demoted at its first bad piece (one connection, chosen last) and
///   dropped, ``SourceDropReason/badPieces(count:)``, at its second — unless no other eligible source is left.
/// - The piece is fetched again from an eligible source that has not sent a bad copy of it (not demoted
///   first, then the first listed); when every one has, from one that sent a single bad copy (the same one
///   once more); when none is left, the download fails naming the piece.
package struct PieceVerifier: Sendable, Hashable {
    /// Where a piece is.
    package enum State: Sendable, Hashable {
        /// Some of its bytes are still to be credited.
        case open
        /// Fully credited; one worker checks it (or fetches it again) until it is verified or the download fails.
        case checking
        /// Its digest matched.
        case verified
    }

    /// What comes after a check.
    package enum Next: Sendable, Hashable {
        case verified
        /// Write the piece again from this source, then check it again.
        case refetch(from: Int)
        /// No source can give a good copy: the download fails naming the piece.
        case fail
    }

    /// A check's decision.
    package struct Decision: Sendable, Hashable {
        package var next: Next
        /// Sources demoted by this bad piece (their first).
        package var demote: [Int] = []
        /// Sources dropped by this bad piece, with their count of bad pieces.
        package var drop: [Int: Int] = [:]

        package init(next: Next, demote: [Int] = [], drop: [Int: Int] = [:]) {
            self.next = next
            self.demote = demote
            self.drop = drop
        }
    }

    /// Bad pieces after which a source is dropped (while another is left).
    package static let dropAfter = 2
    /// Bad copies of one piece a source may send before it is not asked for that piece again.
    package static let copiesPerSource = 2

    package let pieceLength: Int64
    package let total: Int64
    package private(set) var states: [State]
    private var credited: [Int64]
    /// Per piece, the sources whose credits wrote it in this run.
    private var writers: [Set<Int>]
    /// Per piece, bad copies by source.
    private var badCopies: [Int: [Int: Int]] = [:]
    /// Per source: bad pieces it sent, pieces fetched again from it.
    package private(set) var badPieces: [Int]
    package private(set) var refetched: [Int]
    package private(set) var demoted: Set<Int> = []

    /// - Parameters:
    ///   - runs: byte ranges already credited (a resumed map); pieces they cover completely are `checking`
    ///     (``unchecked``) unless in `verified`.
    ///   - verified: pieces the journal recorded as verified (trusted only when fully covered by `runs`).
    /// The number of pieces of `pieceLength` bytes a file of `total` bytes has: ⌈total ÷ pieceLength⌉ (0 for
    /// an empty file or a length that is not positive).
    package static func pieceCount(total: Int64, pieceLength: Int64) -> Int {
        guard pieceLength > 0, total > 0 else { return 0 }
        return Int((total - 1) / pieceLength + 1)
    }

    package init(pieceLength: Int64, total: Int64, sourceCount: Int, runs: [Range<Int64>] = [], verified: Set<Int> = []) {
        self.pieceLength = max(1, pieceLength)
        self.total = max(0, total)
        let count = Self.pieceCount(total: total, pieceLength: self.pieceLength)
        states = Array(repeating: .open, count: count)
        credited = Array(repeating: 0, count: count)
        writers = Array(repeating: [], count: count)
        badPieces = Array(repeating: 0, count: max(1, sourceCount))
        refetched = Array(repeating: 0, count: max(1, sourceCount))
        for run in runs { _ = credit(run, from: nil) }
        for piece in verified where states.indices.contains(piece) && states[piece] == .checking { states[piece] = .verified }
    }

    package var count: Int { states.count }

    package func range(of piece: Int) -> Range<Int64> {
        let start = Int64(piece) * pieceLength
        return start..<min(total, start + pieceLength)
    }

    // MARK: - Events

    /// Bytes `range` were credited from `source` (nil: found written on resume). Returns the pieces this
    /// completed, now `checking`: the caller checks them.
    package mutating func credit(_ span: Range<Int64>, from source: Int?) -> [Int] {
        let lower = max(0, span.lowerBound)
        let upper = min(total, span.upperBound)
        guard lower < upper else { return [] }
        var completed: [Int] = []
        for piece in Int(lower / pieceLength)...Int((upper - 1) / pieceLength) {
            let bytes = range(of: piece)
            credited[piece] += min(upper, bytes.upperBound) - max(lower, bytes.lowerBound)
            if let source { writers[piece].insert(source) }
            if credited[piece] >= Int64(bytes.count) && states[piece] == .open {
                states[piece] = .checking
                completed.append(piece)
            }
        }
        return completed
    }

    /// Pieces complete and not yet verified (after ``init(pieceLength:total:sourceCount:runs:verified:)``: the
    /// resumed pieces the journal did not record as verified).
    package var unchecked: [Int] { states.indices.filter { states[$0] == .checking } }

    /// A resumed piece was checked from disk: good → verified; bad → open again with nothing credited (its
    /// bytes are fetched like any missing range; no source is blamed).
    package mutating func resumeChecked(_ piece: Int, good: Bool) {
        guard states.indices.contains(piece), states[piece] == .checking else { return }
        if good {
            states[piece] = .verified
        } else {
            states[piece] = .open
            credited[piece] = 0
            writers[piece] = []
        }
    }

    /// Piece `piece` (checking) was hashed: `good` or not. `eligible` are the sources that may send it again
    /// (live and agreeing), in the request's order.
    package mutating func checked(_ piece: Int, good: Bool, eligible: [Int]) -> Decision {
        guard states.indices.contains(piece), states[piece] == .checking else { return Decision(next: .fail) }
        if good {
            states[piece] = .verified
            writers[piece] = []
            return Decision(next: .verified)
        }
        var decision = Decision(next: .fail)
        var live = eligible
        // Written by several sources, one of which already sent a bad piece (a dropped source's partial
        // piece finished by another): only the suspects are blamed.
        let written = writers[piece].filter { badPieces.indices.contains($0) }
        let suspects = written.filter { badPieces[$0] > 0 }
        for source in (suspects.isEmpty ? written : suspects).sorted() {
            badCopies[piece, default: [:]][source, default: 0] += 1
            badPieces[source] += 1
            if badPieces[source] >= Self.dropAfter, live.contains(source), live.contains(where: { $0 != source }) {
                decision.drop[source] = badPieces[source]
                live.removeAll { $0 == source }
            } else if !demoted.contains(source) {
                demoted.insert(source)
                decision.demote.append(source)
            }
        }
        let copies = badCopies[piece] ?? [:]
        func rank(_ candidates: [Int]) -> Int? {
            candidates.min { (demoted.contains($0) ? 1 : 0, $0) < (demoted.contains($1) ? 1 : 0, $1) }
        }
        guard
            let source = rank(live.filter { copies[$0, default: 0] == 0 })
                ?? rank(live.filter { copies[$0, default: 0] < Self.copiesPerSource })
        else { return decision }
        if refetched.indices.contains(source) { refetched[source] += 1 }
        writers[piece] = [source]
        decision.next = .refetch(from: source)
        return decision
    }

    // MARK: - Views

    package var allVerified: Bool { states.allSatisfy { $0 == .verified } }
    package var verified: [Int] { states.indices.filter { states[$0] == .verified } }
    /// Bad copies of `piece` received so far.
    package func badCopyCount(_ piece: Int) -> Int { (badCopies[piece] ?? [:]).values.reduce(0, +) }
}
