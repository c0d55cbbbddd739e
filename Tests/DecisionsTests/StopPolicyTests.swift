import Testing

@testable import DownloadKitDecisions

/// The stop and clean-up rule as a table: why the run stopped and what the partial holds in, what
/// happens to the working files out.
@Suite struct StopPolicyTests {
    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var stop: StopPolicy.Stop
        var holdsLock = true
        var received = true
        var segmented = false
        var hasWorkingFile = true
        var disposal: StopPolicy.Disposal
        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(name: "cancel removes the files it holds", stop: .cancel, disposal: .remove),
        Row(name: "cancel never touches files another writer holds", stop: .cancel, holdsLock: false, disposal: .leave),
        Row(name: "pause keeps the partial, checkpointed", stop: .pause, disposal: .keep),
        Row(name: "pause with nothing received still checkpoints", stop: .pause, received: false, disposal: .keep),
        Row(name: "a transient failure keeps the bytes for a resume", stop: .failure(.other), disposal: .keep),
        Row(name: "a segmented failure keeps the map", stop: .failure(.other), segmented: true, disposal: .keep),
        Row(name: "a failure before any byte leaves no clutter", stop: .failure(.other), received: false, disposal: .remove),
        Row(name: "a wrong checksum removes the complete but wrong file", stop: .failure(.fileWrong), disposal: .remove),
        Row(name: "a wrong checksum of files another writer holds touches nothing", stop: .failure(.fileWrong),
            holdsLock: false, disposal: .leave),
        Row(name: "a bad piece on one connection removes the file", stop: .failure(.pieceWrong), disposal: .remove),
        Row(name: "a bad piece of a segmented run keeps the verified others", stop: .failure(.pieceWrong),
            segmented: true, disposal: .keep),
        Row(name: "a failure without a partial path leaves nothing to keep", stop: .failure(.other),
            hasWorkingFile: false, disposal: .leave),
        Row(name: "a failure of a writer refused the lock touches nothing", stop: .failure(.other), holdsLock: false,
            received: false, disposal: .leave),
    ]

    @Test(arguments: rows)
    func disposal(_ row: Row) {
        let disposal = StopPolicy.disposal(
            for: row.stop, holdsLock: row.holdsLock, received: row.received, segmented: row.segmented,
            hasWorkingFile: row.hasWorkingFile)
        #expect(disposal == row.disposal)
    }
}
