import Testing

@testable import DownloadKitDecisions

/// The segment board's rules as tables: events in (take, request, claim, record, release, stop,
/// restart), decisions out; the plans it is built from (a fresh split, a recovered map) and its
/// accounting pass. No file, no thread: `SegmentScheduleTests` explores the schedules.
@Suite("SegmentBoardState")
struct SegmentBoardStateTests {
    /// The caller's error a board carries in `Stop.failed`; never read by the board.
    struct Failed: Error, Equatable {
        var name: String
    }
    typealias Board = SegmentBoardState<Failed>

    /// A segment of a saved map as a caller records it.
    struct Saved: SavedSegment {
        var start: Int64
        var end: Int64?
        var written: Int64
    }

    static func board(_ plans: [SegmentPlan], minimum: Int64 = 8, alignment: Int64 = 8) -> Board {
        Board(plans: plans, minimumSegmentSize: minimum, alignment: alignment)
    }

    // MARK: - Claims and credits

    /// What happens before the owner of `[0, 64)` (worker 0, nothing written) claims.
    enum Before: Sendable {
        case nothing
        case claim(at: Int64, count: Int)
        case credit(count: Int)
        case stop
        case release
    }

    struct ClaimRow: Sendable, CustomTestStringConvertible {
        var name: String
        var before: Before = .nothing
        var worker = 0
        var at: Int64 = 0
        var count: Int
        var allowed: Int
        var testDescription: String { name }
    }

    static let claimRows: [ClaimRow] = [
        ClaimRow(name: "a claim at the position is granted", count: 16, allowed: 16),
        ClaimRow(name: "past the segment's end: up to the end", count: 100, allowed: 64),
        ClaimRow(name: "not at the segment's position", at: 8, count: 16, allowed: 0),
        ClaimRow(name: "zero bytes", count: 0, allowed: 0),
        ClaimRow(name: "another worker's segment", worker: 1, count: 16, allowed: 0),
        ClaimRow(name: "a claim already open", before: .claim(at: 0, count: 8), at: 0, count: 8, allowed: 0),
        ClaimRow(name: "after a credit: at the new position", before: .credit(count: 24), at: 24, count: 100, allowed: 40),
        ClaimRow(name: "after a credit: the old position is refused", before: .credit(count: 24), at: 0, count: 8, allowed: 0),
        ClaimRow(name: "the board stopped", before: .stop, count: 16, allowed: 0),
        ClaimRow(name: "the segment was given back", before: .release, count: 16, allowed: 0),
    ]

    @Test(arguments: claimRows) func claims(_ row: ClaimRow) throws {
        var board = Self.board([SegmentPlan(start: 0, end: 64, written: 0)])
        let taken = board.take(worker: 0)
        let owner = try #require(taken)
        switch row.before {
        case .nothing: break
        case .claim(let at, let count): _ = board.claim(owner.handle, worker: 0, at: at, count: count)
        case .credit(let count):
            _ = board.claim(owner.handle, worker: 0, at: 0, count: count)
            _ = board.record(owner.handle, worker: 0, at: 0, count: count)
        case .stop: board.stop(.failed(Failed(name: "disk full")))
        case .release: board.release(owner.handle, worker: 0)
        }
        #expect(board.claim(owner.handle, worker: row.worker, at: row.at, count: row.count) == row.allowed)
    }

    struct RecordRow: Sendable, CustomTestStringConvertible {
        var name: String
        var claim: Int? = 32
        var stopFirst = false
        var worker = 0
        var at: Int64 = 0
        var count: Int
        var credited: Range<Int64>
        var wantsMore: Bool
        /// Whether the owner may claim again at its position afterwards (a refused record leaves the claim open).
        var claimsAgain = true
        var testDescription: String { name }
    }

    static let recordRows: [RecordRow] = [
        RecordRow(name: "what was claimed", count: 32, credited: 0..<32, wantsMore: true),
        RecordRow(name: "a short write: what was written", count: 10, credited: 0..<10, wantsMore: true),
        RecordRow(name: "more than the claim: the claim only", count: 50, credited: 0..<32, wantsMore: true),
        RecordRow(
            name: "the whole segment: it wants no more", claim: 64, count: 64, credited: 0..<64, wantsMore: false, claimsAgain: false),
        RecordRow(name: "no claim open: nothing", claim: nil, count: 32, credited: 0..<0, wantsMore: true),
        RecordRow(name: "not at the position: nothing", at: 8, count: 32, credited: 8..<8, wantsMore: false, claimsAgain: false),
        RecordRow(name: "another worker: nothing", worker: 1, count: 32, credited: 0..<0, wantsMore: false, claimsAgain: false),
        RecordRow(
            name: "stopped after the claim: the written bytes count, nothing more is wanted", stopFirst: true, count: 32,
            credited: 0..<32, wantsMore: false, claimsAgain: false),
    ]

    @Test(arguments: recordRows) func credits(_ row: RecordRow) throws {
        var board = Self.board([SegmentPlan(start: 0, end: 64, written: 0)])
        let taken = board.take(worker: 0)
        let owner = try #require(taken)
        if let claim = row.claim { #expect(board.claim(owner.handle, worker: 0, at: 0, count: claim) == claim) }
        if row.stopFirst { board.stop(.stopped) }
        let (credited, wantsMore) = board.record(owner.handle, worker: row.worker, at: row.at, count: row.count)
        #expect(credited == row.credited)
        #expect(wantsMore == row.wantsMore)
        #expect(board.written == Int64(row.credited.count))
        #expect(board.creditedThisRun == Int64(row.credited.count))
        #expect(board.claim(owner.handle, worker: 0, at: board.segments[0].position, count: 1) == (row.claimsAgain ? 1 : 0))
    }

    @Test func aStealNeverCutsBelowClaimedBytes() throws {
        var state = Self.board([.init(start: 0, end: 64, written: 0)])
        let first = state.take(worker: 0)
        let owner = try #require(first)
        #expect(state.beginRequest(owner.handle, worker: 0, maximum: 64) == 0..<64)
        #expect(state.claim(owner.handle, worker: 0, at: 0, count: 40) == 40)
        // Every remainder is requested: the thief cuts into the request, but above the claim.
        let taken = state.take(worker: 1)
        let thief = try #require(taken)
        #expect(thief.position >= 40)
        #expect(state.record(owner.handle, worker: 0, at: 0, count: 40).credited == 0..<40)
        // The owner's next buffer may only fill its own, shrunken segment.
        #expect(state.claim(owner.handle, worker: 0, at: 40, count: 64) == Int(thief.position - 40))
        // A position lookup is never used: the thief's segment refuses the owner.
        #expect(state.claim(thief.handle, worker: 0, at: thief.position, count: 8) == 0)
    }

    @Test func aRequestSentAheadStartsWhereTheRequestsInFlightEndAndIsSparedByASparingThief() throws {
        var state = Self.board([.init(start: 0, end: 256, written: 0)])
        let taken = state.take(worker: 0)
        let owner = try #require(taken)
        #expect(state.beginRequest(owner.handle, worker: 0, maximum: 32) == 0..<32)
        // Sent ahead: from the end of the request in flight, not from the written position.
        #expect(state.continueRequest(owner.handle, worker: 0, maximum: 32) == 32..<64)
        #expect(state.continueRequest(owner.handle, worker: 1, maximum: 32) == nil, "only the owner asks")
        // A sparing thief splits what no request covers: above 64, never inside the request sent ahead.
        let stolen = state.take(worker: 1)
        let thief = try #require(stolen)
        #expect(thief.position == 160)
        // The owner's requests end at the stolen boundary, and nothing is asked past it.
        #expect(state.continueRequest(owner.handle, worker: 0, maximum: 1000) == 64..<160)
        #expect(state.continueRequest(owner.handle, worker: 0, maximum: 32) == nil)
        // After a dropped connection the owner starts again from what it wrote.
        #expect(state.beginRequest(owner.handle, worker: 0, maximum: 32) == 0..<32)
        state.stop(.stopped)
        #expect(state.continueRequest(owner.handle, worker: 0, maximum: 32) == nil, "nothing is asked after a stop")
    }

    // MARK: - Takes and steals

    struct TakeRow: Sendable, CustomTestStringConvertible {
        var name: String
        var plans: [SegmentPlan]
        /// Worker 0 takes first and asks for this many bytes (nil: no request in flight).
        var ownerRequest: Int64?
        var stopped = false
        /// What worker 1 gets: (position, end), nil for nothing.
        var taken: Range<Int64>?
        /// Workers holding a segment afterwards.
        var active = 2
        var testDescription: String { name }
    }

    static let takeRows: [TakeRow] = [
        TakeRow(
            name: "an unowned segment first", plans: [.init(start: 0, end: 64, written: 0), .init(start: 64, end: 128, written: 16)],
            taken: 80..<128),
        TakeRow(name: "half of an owned remainder, aligned up", plans: [.init(start: 0, end: 100, written: 0)], taken: 56..<100),
        TakeRow(name: "half above the request in flight", plans: [.init(start: 0, end: 256, written: 0)], ownerRequest: 64, taken: 160..<256),
        TakeRow(
            name: "the request covers all: it is cut above the claim", plans: [.init(start: 0, end: 64, written: 0)], ownerRequest: 64,
            taken: 32..<64),
        TakeRow(name: "too little left to split", plans: [.init(start: 0, end: 15, written: 0)], taken: nil, active: 1),
        TakeRow(name: "a written segment is not handed out", plans: [.init(start: 0, end: 64, written: 64)], taken: nil, active: 0),
        TakeRow(name: "the board stopped", plans: [.init(start: 0, end: 256, written: 0)], stopped: true, taken: nil, active: 1),
    ]

    @Test(arguments: takeRows) func takes(_ row: TakeRow) {
        var board = Self.board(row.plans)
        if let owner = board.take(worker: 0), let request = row.ownerRequest {
            _ = board.beginRequest(owner.handle, worker: 0, maximum: request)
        }
        if row.stopped { board.stop(.failed(Failed(name: "first"))) }
        let taken = board.take(worker: 1)
        #expect(taken.map { $0.position..<$0.end } == row.taken)
        #expect(board.active == row.active)
    }

    @Test func theFirstStopWinsAndAReleaseFreesTheConnection() throws {
        var board = Self.board([.init(start: 0, end: 64, written: 0)])
        let taken = board.take(worker: 0)
        let owner = try #require(taken)
        #expect(board.active == 1)
        board.stop(.failed(Failed(name: "first")))
        board.stop(.restart(.validatorChanged))
        #expect(board.stopReason == .failed(Failed(name: "first")))
        #expect(board.remaining(owner.handle, worker: 0) == 0, "nothing is left to a stopped board")
        board.release(owner.handle, worker: 1)
        #expect(board.active == 1, "only the owner gives a segment back")
        board.release(owner.handle, worker: 0)
        #expect(board.active == 0)
    }

    @Test func handlesOfAnEarlierGenerationAreRefusedAfterARestart() {
        var state = Self.board([.init(start: 0, end: 32, written: 0)])
        let old = state.take(worker: 0)!
        state.stop(.restart(.validatorChanged))
        state.restart(segments: [.init(start: 0, end: 32, written: 0)])
        #expect(state.stopReason == nil)
        #expect(state.generation == 1)
        #expect(state.claim(old.handle, worker: 0, at: 0, count: 8) == 0)
        #expect(state.record(old.handle, worker: 0, at: 0, count: 8).credited.isEmpty)
        #expect(state.take(worker: 0)?.position == 0)
    }

    // MARK: - The accounting pass

    struct CoverageRow: Sendable, CustomTestStringConvertible {
        var name: String
        var plans: [SegmentPlan]
        /// Bytes of the last segment credited in this run before the check.
        var credit = 0
        var total: Int64 = 32
        var gap: CoverageGap?
        var testDescription: String { name }
    }

    static let coverageRows: [CoverageRow] = [
        CoverageRow(name: "every byte resumed", plans: [.init(start: 0, end: 16, written: 16), .init(start: 16, end: 32, written: 16)]),
        CoverageRow(
            name: "the rest credited in this run", plans: [.init(start: 0, end: 16, written: 16), .init(start: 16, end: 32, written: 8)],
            credit: 8),
        CoverageRow(
            name: "bytes never credited", plans: [.init(start: 0, end: 16, written: 16), .init(start: 16, end: 32, written: 8)],
            gap: .uncredited(24..<32)),
        CoverageRow(
            name: "a gap between segments", plans: [.init(start: 0, end: 16, written: 16), .init(start: 20, end: 32, written: 12)],
            gap: .misplacedSegment(start: 20, expected: 16)),
        CoverageRow(
            name: "an overlap", plans: [.init(start: 0, end: 16, written: 16), .init(start: 8, end: 32, written: 24)],
            gap: .misplacedSegment(start: 8, expected: 16)),
        CoverageRow(name: "a map that does not start at 0", plans: [.init(start: 4, end: 32, written: 28)], gap: .misplacedSegment(start: 4, expected: 0)),
        CoverageRow(
            name: "the segments end before the total", plans: [.init(start: 0, end: 16, written: 16), .init(start: 16, end: 32, written: 8)],
            credit: 8, total: 40, gap: .shortOfTotal(covered: 32, total: 40)),
        CoverageRow(name: "no segment at all", plans: [], gap: .shortOfTotal(covered: 0, total: 32)),
    ]

    @Test(arguments: coverageRows) func coverage(_ row: CoverageRow) throws {
        var board = Self.board(row.plans)
        if row.credit > 0 {
            let taken = board.take(worker: 0)
            let next = try #require(taken)
            #expect(board.claim(next.handle, worker: 0, at: next.position, count: row.credit) == row.credit)
            _ = board.record(next.handle, worker: 0, at: next.position, count: row.credit)
        }
        #expect(board.coverageGap(total: row.total) == row.gap)
    }

    @Test func theSnapshotAndTheCreditedRunsAreTheWrittenPrefixes() throws {
        var board = Self.board([.init(start: 0, end: 64, written: 8), .init(start: 64, end: 128, written: 0)])
        let taken = board.take(worker: 0)
        let owner = try #require(taken)
        _ = board.claim(owner.handle, worker: 0, at: 8, count: 8)
        #expect(board.snapshot() == [.init(start: 0, end: 64, written: 8), .init(start: 64, end: 128, written: 0)], "claimed is not credited")
        _ = board.record(owner.handle, worker: 0, at: 8, count: 8)
        #expect(board.snapshot()[0].written == 16)
        #expect(board.creditedRuns == [0..<16])
    }

    // MARK: - Plans

    struct SplitRow: Sendable, CustomTestStringConvertible {
        var name: String
        var from: Int64 = 0
        var total: Int64
        var count: Int
        var minimum: Int64 = 10
        var alignment: Int64 = 1
        var starts: [Int64]
        var testDescription: String { name }
    }

    static let splitRows: [SplitRow] = [
        SplitRow(name: "equal parts", total: 100, count: 4, starts: [0, 25, 50, 75]),
        SplitRow(name: "no part below the minimum", total: 100, count: 4, minimum: 40, starts: [0, 50]),
        SplitRow(name: "one part when the length is below the minimum", total: 30, count: 4, minimum: 40, starts: [0]),
        SplitRow(name: "after a prefix", from: 40, total: 100, count: 3, starts: [40, 60, 80]),
        SplitRow(name: "inner boundaries aligned down", total: 100, count: 3, alignment: 16, starts: [0, 32, 64]),
        SplitRow(name: "boundaries that align together merge", total: 100, count: 4, alignment: 32, starts: [0, 32, 64]),
        SplitRow(name: "nothing to split", from: 100, total: 100, count: 4, starts: []),
    ]

    @Test(arguments: splitRows) func split(_ row: SplitRow) {
        let plans = SegmentPlan.split(
            from: row.from, total: row.total, count: row.count, minimumSegmentSize: row.minimum, alignment: row.alignment)
        #expect(plans.map(\.start) == row.starts)
        #expect(plans.last?.end == (row.starts.isEmpty ? nil : row.total))
        #expect(zip(plans, plans.dropFirst()).allSatisfy { $0.end == $1.start } && plans.allSatisfy { $0.written == 0 })
    }

    struct RecoverRow: Sendable, CustomTestStringConvertible {
        var name: String
        var saved: [Saved]
        var journal: [Range<Int64>] = []
        var fileSize: Int64 = 100
        var plans: [SegmentPlan]?
        var testDescription: String { name }
    }

    static let twoSegments = [Saved(start: 0, end: 50, written: 10), Saved(start: 50, end: 100, written: 5)]

    static let recoverRows: [RecoverRow] = [
        RecoverRow(
            name: "the map as saved", saved: twoSegments,
            plans: [.init(start: 0, end: 50, written: 10), .init(start: 50, end: 100, written: 5)]),
        RecoverRow(
            name: "merged with the journal, nothing beyond the file", saved: twoSegments, journal: [10..<30, 55..<70, 90..<120],
            fileSize: 95,
            plans: [.init(start: 0, end: 50, written: 30), .init(start: 50, end: 90, written: 20), .init(start: 90, end: 100, written: 5)]),
        RecoverRow(
            name: "a file shorter than the credits", saved: twoSegments, fileSize: 5,
            plans: [.init(start: 0, end: 100, written: 5)]),
        RecoverRow(
            name: "an unknown end is the total's", saved: [Saved(start: 0, end: nil, written: 30)],
            plans: [.init(start: 0, end: 100, written: 30)]),
        RecoverRow(
            name: "written beyond a segment's end counts to its end", saved: [Saved(start: 0, end: 40, written: 70), Saved(start: 40, end: 100, written: 0)],
            plans: [.init(start: 0, end: 100, written: 40)]),
        RecoverRow(name: "an overlapping map is unusable", saved: twoSegments + [Saved(start: 40, end: 60, written: 0)], plans: nil),
        RecoverRow(name: "a map past the total is unusable", saved: [Saved(start: 0, end: 120, written: 0)], plans: nil),
        RecoverRow(name: "an empty segment is unusable", saved: [Saved(start: 10, end: 10, written: 0)], plans: nil),
        RecoverRow(name: "no map, no journal: one empty segment", saved: [], plans: [.init(start: 0, end: 100, written: 0)]),
    ]

    @Test(arguments: recoverRows) func recover(_ row: RecoverRow) {
        #expect(SegmentPlan.recover(saved: row.saved, journal: row.journal, fileSize: row.fileSize, total: 100) == row.plans)
    }

    static let subtractRows: [(removed: [Range<Int64>], runs: [Range<Int64>], left: [Range<Int64>])] = [
        ([100..<200], [0..<250, 300..<350], [0..<100, 200..<250, 300..<350]),
        ([0..<100, 300..<400], [50..<350], [100..<300]),
        ([], [300..<400, 0..<100], [0..<100, 300..<400]),
        ([0..<1000], [50..<350], []),
        ([100..<200], [0..<100, 200..<300], [0..<100, 200..<300]),
    ]

    @Test(arguments: subtractRows.indices) func subtract(_ index: Int) {
        let row = Self.subtractRows[index]
        #expect(SegmentPlan.subtract(row.removed, from: row.runs) == row.left)
    }

    static let prefixRows: [(segments: [Saved], prefix: Int64)] = [
        ([], 0),
        ([Saved(start: 0, end: 50, written: 50), Saved(start: 50, end: 100, written: 20)], 70),
        ([Saved(start: 50, end: 100, written: 20), Saved(start: 0, end: 50, written: 50)], 70),
        ([Saved(start: 0, end: 50, written: 30), Saved(start: 50, end: 100, written: 50)], 30),
        ([Saved(start: 10, end: 50, written: 40)], 0),
        ([Saved(start: 0, end: nil, written: 30), Saved(start: 30, end: 100, written: 70)], 30),
    ]

    @Test(arguments: prefixRows.indices) func contiguousPrefix(_ index: Int) {
        let row = Self.prefixRows[index]
        #expect(SegmentPlan.contiguousPrefix(row.segments) == row.prefix)
    }
}
