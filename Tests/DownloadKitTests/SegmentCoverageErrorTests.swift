@_spi(DownloadKitInternal) @testable import DownloadKit
import Testing

/// The one translation of the segment board's accounting gaps (`CoverageGap`, a value of the decisions
/// module) into DownloadKit's error: its code, and a message naming the offsets.
@Suite struct SegmentCoverageErrorTests {
    static let rows: [(gap: CoverageGap, message: String)] = [
        (.misplacedSegment(start: 20, expected: 16), "segment accounting failed: a segment starts at 20, expected 16 (gap or overlap)"),
        (.uncredited(24..<32), "segment accounting failed: bytes 24..<32 were never credited"),
        (.shortOfTotal(covered: 32, total: 40), "segment accounting failed: the segments cover 32 of 40 bytes"),
        (.creditsDiffer(resumed: 10, credited: 20, total: 40), "segment accounting failed: 10 bytes resumed + 20 credited ≠ 40"),
    ]

    @Test(arguments: rows.indices) func aGapIsASegmentAccountingErrorNamingTheOffsets(_ index: Int) {
        let error = DownloadError(Self.rows[index].gap)
        #expect(error.code == .segmentAccounting)
        #expect(error.detail == Self.rows[index].message)
    }
}
