import Testing

@testable import DownloadKitDecisions

/// The sources of a download with mirrors as a table (docs/MIRRORS.md): events in, verdicts and
/// assignments out, no socket.
@Suite struct SourceSchedulerTests {
    /// The caller's drop reasons: the scheduler's mismatches, and what a caller reports.
    enum Dropped: SourceDropCause {
        case mismatch(SourceMismatch)
        case failed(String)
        case tooSlow(bytesPerSecond: Int)
        init(_ mismatch: SourceMismatch) { self = .mismatch(mismatch) }
    }
    typealias SourceScheduler = DownloadKitDecisions.SourceScheduler<Dropped>

    static let lastModified = "Mon, 01 Jan 2024 00:00:00 GMT"
    static let reference = SourceScheduler.Reference(total: 1000, lastModified: lastModified)

    /// One answer of mirror 1 and the verdict the agreement rule gives.
    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var reference = SourceSchedulerTests.reference
        var status = 206
        var total: Int64? = 1000
        var lastModified: String? = SourceSchedulerTests.lastModified
        var verdict: SourceScheduler.Verdict
        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(name: "equal length and Last-Modified (ETags are not asked about)", verdict: .agree),
        Row(name: "another length", total: 999, verdict: .drop(.mismatch(.differentLength(expected: 1000, got: 999)))),
        Row(
            name: "another Last-Modified", lastModified: "Tue, 02 Jan 2024 00:00:00 GMT",
            verdict: .drop(.mismatch(.differentLastModified(expected: lastModified, got: "Tue, 02 Jan 2024 00:00:00 GMT")))),
        Row(name: "the mirror sends no Last-Modified: a sample decides", lastModified: nil, verdict: .needsSample),
        Row(
            name: "the first source sent none: a sample decides",
            reference: SourceScheduler.Reference(total: 1000, lastModified: nil), verdict: .needsSample),
        Row(name: "a 200 of the same length (no ranges)", status: 200, verdict: .drop(.mismatch(.noRangeSupport(status: 200)))),
        Row(
            name: "a 200 of another version says so, not 'no ranges'", status: 200,
            lastModified: "Tue, 02 Jan 2024 00:00:00 GMT",
            verdict: .drop(.mismatch(.differentLastModified(expected: lastModified, got: "Tue, 02 Jan 2024 00:00:00 GMT")))),
        Row(name: "a 206 without a total", total: nil, verdict: .drop(.mismatch(.differentLength(expected: 1000, got: nil)))),
        Row(
            name: "a 416 of another length says so, not 'no ranges'", status: 416, total: 500,
            verdict: .drop(.mismatch(.differentLength(expected: 1000, got: 500)))),
        Row(name: "a 200 without a length (no ranges)", status: 200, total: nil, verdict: .drop(.mismatch(.noRangeSupport(status: 200)))),
    ]

    @Test(arguments: rows) func theAgreementRule(_ row: Row) {
        var scheduler = SourceScheduler(count: 2, reference: row.reference, perSource: 1)
        let verdict = scheduler.answered(1, status: row.status, total: row.total, lastModified: row.lastModified)
        #expect(verdict == row.verdict)
        let drops = scheduler.takeDrops()
        if case .drop(let reason) = row.verdict {
            #expect(drops.map(\.index) == [1] && drops.map(\.reason) == [reason], "published once")
            #expect(!scheduler.isLive(1))
            #expect(scheduler.takeDrops().isEmpty)
        } else {
            #expect(drops.isEmpty)
            #expect(scheduler.isLive(1))
        }
    }

    @Test func theFirstSourceAlwaysAgreesItsAnswersAreTheRangePolicys() {
        var scheduler = SourceScheduler(count: 3, reference: Self.reference, perSource: 1)
        #expect(scheduler.answered(0, status: 206, total: 1000, lastModified: nil) == .agree)
    }

    @Test func aSampleAdmitsOrDropsAndAnAgreedMirrorIsCheckedAgainOnEveryAnswer() {
        var scheduler = SourceScheduler(count: 3, reference: Self.reference, perSource: 2)
        #expect(scheduler.answered(1, status: 206, total: 1000, lastModified: nil) == .needsSample)
        #expect(scheduler.sources[1].phase == .sampling)
        #expect(scheduler.sampled(1, range: 0..<64, equal: true) == .agree)
        #expect(scheduler.sources[1].phase == .agreeing)
        #expect(scheduler.answered(1, status: 206, total: 1000, lastModified: nil) == .agree, "no second sample")
        #expect(scheduler.answered(2, status: 206, total: 1000, lastModified: nil) == .needsSample)
        #expect(scheduler.sampled(2, range: 64..<128, equal: false) == .drop(.mismatch(.differentBytes(64..<128))))
        // Mirror 1 turns into another version mid-download: dropped before its bytes are written.
        #expect(
            scheduler.answered(1, status: 206, total: 2000, lastModified: nil)
                == .drop(.mismatch(.differentLength(expected: 1000, got: 2000))))
        #expect(scheduler.takeDrops().map(\.index) == [2, 1])
        #expect(scheduler.hasLiveSource)
    }

    @Test func aSampleNeedsAnotherAgreeingSource() {
        var scheduler = SourceScheduler(count: 3, reference: SourceScheduler.Reference(total: 1000, lastModified: nil), perSource: 1)
        #expect(scheduler.answered(1, status: 206, total: 1000, lastModified: nil) == .needsSample)
        #expect(scheduler.answered(2, status: 206, total: 1000, lastModified: nil) == .needsSample)
        #expect(scheduler.hasAgreeingSource(besides: 1), "the first source")
        _ = scheduler.failed(0, .tooSlow(bytesPerSecond: 0))
        #expect(!scheduler.hasAgreeingSource(besides: 1), "mirror 2 is sampling too: it proves nothing")
        #expect(scheduler.sampled(2, range: 0..<64, equal: true) == .agree)
        #expect(scheduler.hasAgreeingSource(besides: 1))
    }

    @Test func assignmentsSpreadOverSourcesAProbingMirrorHoldsOneConnectionTheFastestGetsTheSpare() {
        var scheduler = SourceScheduler(count: 3, reference: Self.reference, perSource: 2)
        #expect(scheduler.capacity == 6)
        // Least loaded first, then by order: one each.
        #expect([scheduler.assign(), scheduler.assign(), scheduler.assign()] == [0, 1, 2])
        // Mirrors still probing hold one; the first source takes its second.
        #expect(scheduler.assign() == 0)
        #expect(scheduler.assign() == nil, "every source full for now")
        _ = scheduler.answered(1, status: 206, total: 1000, lastModified: Self.lastModified)
        _ = scheduler.answered(2, status: 206, total: 1000, lastModified: Self.lastModified)
        scheduler.served(1, bytes: 100, seconds: 1)
        scheduler.served(2, bytes: 400, seconds: 1)
        #expect(scheduler.assign() == 2, "the faster of two equally loaded sources")
        #expect(scheduler.assign() == 1)
        #expect(scheduler.assign() == nil)
        scheduler.release(0)
        #expect(scheduler.assign() == 0)
    }

    @Test func aFailedSourceIsDroppedTheDownloadFailsOnlyWhenNoneIsLeft() {
        var scheduler = SourceScheduler(count: 3, reference: Self.reference, perSource: 1)
        let refused = "connection refused"
        #expect(scheduler.dropsWhenSlow(1))
        let leftAfterFirst = scheduler.failed(1, .failed(refused))
        let leftAfterSecond = scheduler.failed(0, .tooSlow(bytesPerSecond: 3))
        #expect(leftAfterFirst && leftAfterSecond)
        #expect(!scheduler.dropsWhenSlow(2), "the last source is retried, not dropped for slowness")
        #expect(scheduler.assign() == 2)
        #expect(scheduler.assign() == nil)
        let leftAfterLast = scheduler.failed(2, .failed(refused))
        #expect(!leftAfterLast)
        #expect(!scheduler.hasLiveSource)
        #expect(scheduler.takeDrops().map(\.reason) == [.failed(refused), .tooSlow(bytesPerSecond: 3), .failed(refused)])
        #expect(scheduler.answered(1, status: 206, total: 1000, lastModified: nil) == .drop(.failed(refused)))
    }

    /// A demoted source holds one connection and is assigned last.
    @Test func demotedSourceIsAssignedLast() {
        var scheduler = SourceScheduler(count: 2, reference: .init(total: 1000, lastModified: "x"), perSource: 2)
        _ = scheduler.answered(1, status: 206, total: 1000, lastModified: "x")
        scheduler.demote(0)
        #expect(scheduler.assign() == 1)
        #expect(scheduler.assign() == 1)
        #expect(scheduler.assign() == 0)
        #expect(scheduler.assign() == nil)
    }

    /// A later answer of a mirror that already agreed (by equal `Last-Modified`): checked again.
    static let laterRows: [Row] = [
        Row(name: "the same answer", verdict: .agree),
        Row(name: "no Last-Modified this time: no new sample", lastModified: nil, verdict: .agree),
        Row(
            name: "another Last-Modified", lastModified: "Tue, 02 Jan 2024 00:00:00 GMT",
            verdict: .drop(.mismatch(.differentLastModified(expected: lastModified, got: "Tue, 02 Jan 2024 00:00:00 GMT")))),
        Row(name: "another length", total: 1001, verdict: .drop(.mismatch(.differentLength(expected: 1000, got: 1001)))),
        Row(name: "a 200 now", status: 200, verdict: .drop(.mismatch(.noRangeSupport(status: 200)))),
    ]

    @Test(arguments: laterRows) func anAgreedMirrorIsCheckedOnEveryAnswer(_ row: Row) {
        var scheduler = SourceScheduler(count: 2, reference: Self.reference, perSource: 2)
        #expect(scheduler.answered(1, status: 206, total: 1000, lastModified: Self.lastModified) == .agree)
        #expect(scheduler.sources[1].phase == .agreeing)
        #expect(scheduler.answered(1, status: row.status, total: row.total, lastModified: row.lastModified) == row.verdict)
        if case .drop(let reason) = row.verdict {
            #expect(scheduler.dropReason(1) == reason)
            #expect(scheduler.agreeing == [0])
        } else {
            #expect(scheduler.dropReason(1) == nil)
            #expect(scheduler.agreeing == [0, 1])
        }
    }

    @Test func aDroppedSourceKeepsItsFirstReasonAndIsPublishedOnce() {
        var scheduler = SourceScheduler(count: 2, reference: Self.reference, perSource: 1)
        _ = scheduler.answered(1, status: 206, total: 999, lastModified: nil)
        let first = Dropped.mismatch(.differentLength(expected: 1000, got: 999))
        #expect(scheduler.answered(1, status: 206, total: 1000, lastModified: Self.lastModified) == .drop(first))
        #expect(scheduler.sampled(1, range: 0..<64, equal: true) == .drop(.mismatch(.differentBytes(0..<64))), "no sample revives it")
        let left = scheduler.failed(1, .failed("reset"))
        #expect(left, "the first source is left")
        #expect(scheduler.dropReason(1) == first)
        #expect(scheduler.takeDrops().map(\.reason) == [first])
        #expect(scheduler.assign() == 0)
        #expect(scheduler.assign() == nil, "a dropped source is never assigned")
    }

    @Test func anIndexThatIsNoSourceIsRefusedWithoutADrop() {
        var scheduler = SourceScheduler(count: 2, reference: Self.reference, perSource: 1)
        #expect(scheduler.answered(7, status: 206, total: 1000, lastModified: nil) == .drop(.mismatch(.noRangeSupport(status: 206))))
        #expect(scheduler.sampled(7, range: 0..<64, equal: true) == .drop(.mismatch(.differentBytes(0..<64))))
        let left = scheduler.failed(7, .failed("gone"))
        #expect(left)
        scheduler.release(7)
        scheduler.served(7, bytes: 100, seconds: 1)
        scheduler.demote(7)
        #expect(!scheduler.isLive(7))
        #expect(scheduler.takeDrops().isEmpty)
        #expect(scheduler.sources.count == 2 && scheduler.sources.allSatisfy { $0.isLive && !$0.demoted && $0.bytes == 0 })
    }

    @Test func speedIsBytesOverSecondsAndNegativeSecondsCountAsNone() {
        var scheduler = SourceScheduler(count: 1, reference: Self.reference, perSource: 4)
        #expect(scheduler.sources[0].speed == 0, "no response ended yet")
        scheduler.served(0, bytes: 300, seconds: 2)
        scheduler.served(0, bytes: 100, seconds: -5)
        #expect(scheduler.sources[0].speed == 200)
        #expect(scheduler.capacity == 4)
        scheduler.release(0)
        #expect(scheduler.sources[0].connections == 0, "a release never goes below zero")
    }
}
