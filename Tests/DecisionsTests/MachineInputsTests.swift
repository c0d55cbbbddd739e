import Testing

@testable import DownloadKitDecisions

/// The download machine's inputs that are the module's own values (issue #46): the record's segments
/// (`ResumeSegment`) are the saved maps the plans read, with no caller's type in between.
@Suite("MachineInputs")
struct MachineInputsTests {
    /// The rows of `SegmentBoardStateTests.prefixRows`, as the record stores them.
    @Test(arguments: SegmentBoardStateTests.prefixRows.indices) func recordedPrefix(_ index: Int) {
        let row = SegmentBoardStateTests.prefixRows[index]
        let recorded = row.segments.map { ResumeSegment(start: $0.start, end: $0.end, written: $0.written) }
        #expect(SegmentPlan.contiguousPrefix(recorded) == row.prefix)
    }

    static let pieceTableRows: [(digests: Int, pieceLength: Int64, total: Int64, failure: MachineFailure?)] = [
        (4, 100, 350, nil),
        (4, 100, 400, nil),
        (4, 100, 300, .pieceCount(digests: 4, total: 300, pieceLength: 100, expected: 3)),
        (4, 100, 401, .pieceCount(digests: 4, total: 401, pieceLength: 100, expected: 5)),
        (1, 100, 1, nil),
        (0, 100, 0, nil),
        (1, 100, 0, .pieceCount(digests: 1, total: 0, pieceLength: 100, expected: 0)),
    ]

    /// The piece table's count rule, which the machine applies once the length is known (before a byte is
    /// written) and DownloadKit's `PieceChecksums.validate(total:)` reports through the same failure.
    @Test(arguments: pieceTableRows.indices) func pieceTable(_ index: Int) {
        let row = Self.pieceTableRows[index]
        #expect(MachineFailure.pieceTable(digests: row.digests, pieceLength: row.pieceLength, total: row.total) == row.failure)
    }
}
