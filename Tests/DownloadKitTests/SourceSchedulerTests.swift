@_spi(DownloadKitInternal) @testable import DownloadKit
import Testing

/// The sources of a download with mirrors as a table (docs/MIRRORS.md): events in, verdicts and
/// assignments out, no socket.
@Suite struct SourceSchedulerTests {
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
        Row(name: "another length", total: 999, verdict: .drop(.differentLength(expected: 1000, got: 999))),
        Row(
            name: "another Last-Modified", lastModified: "Tue, 02 Jan 2024 00:00:00 GMT",
            verdict: .drop(.differentLastModified(expected: lastModified, got: "Tue, 02 Jan 2024 00:00:00 GMT"))),
        Row(name: "the mirror sends no Last-Modified: a sample decides", lastModified: nil, verdict: .needsSample),
        Row(
            name: "the first source sent none: a sample decides",
            reference: SourceScheduler.Reference(total: 1000, lastModified: nil), verdict: .needsSample),
        Row(name: "a 200 of the same length (no ranges)", status: 200, verdict: .drop(.noRangeSupport(status: 200))),
        Row(
            name: "a 200 of another version says so, not 'no ranges'", status: 200,
            lastModified: "Tue, 02 Jan 2024 00:00:00 GMT",
            verdict: .drop(.differentLastModified(expected: lastModified, got: "Tue, 02 Jan 2024 00:00:00 GMT"))),
        Row(name: "a 206 without a total", total: nil, verdict: .drop(.differentLength(expected: 1000, got: nil))),
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
        #expect(scheduler.sampled(2, range: 64..<128, equal: false) == .drop(.differentBytes(64..<128)))
        // Mirror 1 turns into another version mid-download: dropped before its bytes are written.
        #expect(
            scheduler.answered(1, status: 206, total: 2000, lastModified: nil)
                == .drop(.differentLength(expected: 1000, got: 2000)))
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
        let refused = DownloadError(.transport, "connection refused")
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
}
