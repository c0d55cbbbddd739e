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
}
