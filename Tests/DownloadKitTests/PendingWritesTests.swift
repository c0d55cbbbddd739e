@testable import DownloadKitManager
import Testing

/// The manager's write-back bookkeeping (PendingWrites): what each change leaves owed, what a commit takes, when
/// the flusher is woken.
@Suite("Pending writes")
struct PendingWritesTests {
    /// One change the actor reports.
    enum Step {
        /// `take` keeps its batch; `fail` hands the last batch taken back as unwritten (a task "gone" is removed).
        case row(String), progress(String), removed(String), flush, take, fail
    }

    struct Row {
        var name: String
        var steps: [Step]
        /// The rows, deletions and progress owed after the steps.
        var rows: Set<String>
        var deletions: Set<String>
        var progress: Set<String>
        /// The flusher wakes the progress steps answered, in order.
        var wakes: [PendingWrites.FlusherWake]
        /// The batches the take steps returned, in order (nil: nothing owed).
        var batches: [PendingWrites.Batch?]
    }

    static let rows: [Row] = [
        Row(
            name: "a changed row is owed once, then taken", steps: [.row("a"), .row("a"), .take, .take],
            rows: [], deletions: [], progress: [], wakes: [],
            batches: [.init(rows: ["a"], deletions: []), nil]),
        Row(
            name: "the first progress change wakes the flusher, the next ones do not",
            steps: [.progress("a"), .progress("b"), .progress("a")],
            rows: [], deletions: [], progress: ["a", "b"], wakes: [.wake, .none, .none], batches: []),
        Row(
            name: "progress alone is not taken by a commit: it waits for the flusher",
            steps: [.progress("a"), .take], rows: [], deletions: [], progress: ["a"], wakes: [.wake], batches: [nil]),
        Row(
            name: "the flusher's turn makes the progress rows, and the next progress wakes it again",
            steps: [.progress("a"), .flush, .progress("b"), .take],
            rows: [], deletions: [], progress: ["b"], wakes: [.wake, .wake],
            batches: [.init(rows: ["a"], deletions: [])]),
        Row(
            name: "a whole row makes the progress write of its task needless",
            steps: [.progress("a"), .progress("b"), .row("a")],
            rows: ["a"], deletions: [], progress: ["b"], wakes: [.wake, .none], batches: []),
        Row(
            name: "progress of a task whose row is owed is not owed again, but still wakes the flusher",
            steps: [.row("a"), .progress("a")], rows: ["a"], deletions: [], progress: [], wakes: [.wake], batches: []),
        Row(
            name: "progress after a row was taken is owed, until the row is owed again",
            steps: [.row("a"), .take, .progress("a"), .row("a"), .progress("a"), .take],
            rows: [], deletions: [], progress: [], wakes: [.wake, .none],
            batches: [.init(rows: ["a"], deletions: []), .init(rows: ["a"], deletions: [])]),
        Row(
            name: "a failed row owed again takes in the progress reported since it was taken",
            steps: [.row("a"), .take, .progress("a"), .fail],
            rows: ["a"], deletions: [], progress: [], wakes: [.wake],
            batches: [.init(rows: ["a"], deletions: [])]),
        Row(
            name: "a removed task owes its deletion only",
            steps: [.row("a"), .progress("a"), .progress("b"), .removed("a"), .take],
            rows: [], deletions: [], progress: ["b"], wakes: [.wake, .none],
            batches: [.init(rows: [], deletions: ["a"])]),
        Row(
            name: "a failed batch is owed again, less the rows of tasks gone meanwhile",
            steps: [.row("a"), .row("gone"), .removed("x"), .take, .fail],
            rows: ["a"], deletions: ["x"], progress: [], wakes: [],
            batches: [.init(rows: ["a", "gone"], deletions: ["x"])]),
    ]

    @Test("each sequence of changes leaves what it owes", arguments: rows)
    func table(_ row: Row) {
        var writes = PendingWrites()
        var wakes: [PendingWrites.FlusherWake] = []
        var batches: [PendingWrites.Batch?] = []
        var taken: PendingWrites.Batch?
        for step in row.steps {
            switch step {
            case .row(let id): writes.rowChanged(id)
            case .progress(let id): wakes.append(writes.progressChanged(id))
            case .removed(let id): writes.removed(id)
            case .flush: writes.flushProgress()
            case .take:
                taken = writes.take()
                batches.append(taken)
            case .fail:
                if let batch = taken { writes.unwritten(batch) { $0 != "gone" } }
            }
        }
        #expect(writes.rows == row.rows, "\(row.name)")
        #expect(writes.deletions == row.deletions, "\(row.name)")
        #expect(writes.progress == row.progress, "\(row.name)")
        #expect(wakes == row.wakes, "\(row.name)")
        #expect(batches == row.batches, "\(row.name)")
    }

    @Test("flushes are counted by the flusher's turns only, not by the last write on close")
    func flushesCounted() {
        var writes = PendingWrites()
        _ = writes.progressChanged("a")
        writes.progressJoinsRows()
        #expect(writes.flushes == 0)
        #expect(writes.rows == ["a"])
        writes.flushProgress()
        #expect(writes.flushes == 1)
        #expect(!writes.flusherWoken)
    }
}

extension PendingWritesTests.Row: CustomTestStringConvertible {
    var testDescription: String { name }
}
