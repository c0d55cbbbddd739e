/// The rows the manager owes its store — whole rows changed, rows deleted, rows whose only change is the bytes
/// received — and the rules between them, as one value: the actor says what happened and performs what it is told
/// (writes a batch, wakes the flusher).
///
/// - A whole row to write makes a progress write of the same task needless: the row is read from the task table
///   when its batch is taken, with the bytes received of that moment.
/// - A deleted task owes nothing but its deletion.
/// - The first progress change after a flush answers ``FlusherWake/wake``: the flusher sleeps while nothing is
///   owed and writes progress one interval after it is woken, so progress is written at most once per interval.
struct PendingWrites: Equatable {
    /// What the actor does after a progress change.
    enum FlusherWake: Equatable {
        /// Wake the flusher: this is the first progress change since it last flushed.
        case wake
        /// Nothing: the flusher is already woken.
        case none
    }

    /// One transaction's share: the rows to write (read from the task table when taken) and the deletions.
    struct Batch: Equatable {
        var rows: Set<String>
        var deletions: Set<String>
    }

    /// Tasks whose whole row is to be written.
    private(set) var rows: Set<String> = []
    /// Tasks removed whose rows are to be deleted.
    private(set) var deletions: Set<String> = []
    /// Tasks whose bytes received changed since their row was last written (written by the flusher).
    private(set) var progress: Set<String> = []
    /// Whether the flusher was woken and has not flushed yet.
    private(set) var flusherWoken = false
    /// How many times the flusher wrote progress (tests: none while idle).
    private(set) var flushes = 0

    /// Room for `extra` more rows (a batch enqueue grew the set one rehash at a time).
    mutating func reserveCapacity(adding extra: Int) {
        rows.reserveCapacity(rows.count + extra)
    }

    /// A task's row changed (or was added): its whole row is written at the next commit.
    mutating func rowChanged(_ id: String) {
        rows.insert(id)
        progress.remove(id)
    }

    /// A task's bytes received changed; ``FlusherWake/wake`` when the flusher is to be woken.
    mutating func progressChanged(_ id: String) -> FlusherWake {
        if !rows.contains(id) { progress.insert(id) }
        guard !flusherWoken else { return .none }
        flusherWoken = true
        return .wake
    }

    /// A task was removed: its row is deleted at the next commit and nothing else of it written.
    mutating func removed(_ id: String) {
        rows.remove(id)
        progress.remove(id)
        deletions.insert(id)
    }

    /// The flusher's turn: the progress owed joins the rows of the next batch, and the next progress change wakes
    /// the flusher again.
    mutating func flushProgress() {
        flushes += 1
        flusherWoken = false
        progressJoinsRows()
    }

    /// The progress owed joins the rows of the next batch (the flusher's turn, or the last write on close).
    mutating func progressJoinsRows() {
        rows.formUnion(progress)
        progress = []
    }

    /// Takes every row and deletion owed for one transaction (then no longer owed), nil when nothing is.
    mutating func take() -> Batch? {
        guard !rows.isEmpty || !deletions.isEmpty else { return nil }
        let batch = Batch(rows: rows, deletions: deletions)
        rows = []
        deletions = []
        return batch
    }

    /// A batch whose transaction failed is owed again, for the next commit — its rows only for the tasks that
    /// `exists` still (a task removed meanwhile owes its deletion instead); progress reported since is then in
    /// those rows.
    mutating func unwritten(_ batch: Batch, exists: (String) -> Bool) {
        rows.formUnion(batch.rows.filter(exists))
        progress.subtract(rows)
        deletions.formUnion(batch.deletions)
    }
}
