/// Who is told of a task's end, and when — the completion handlers, the completions recovered at start, the
/// completions being announced, the held-back `.allFinished` and the callers waiting for the announcements to
/// drain — as one value: its methods answer what to do, and the manager does it (calls the handlers, emits,
/// resumes the waiters).
///
/// - A completion recovered by `restore()` goes to the first completion handler set: it never reached one.
/// - A task's own handler is called once, and forgotten with its task.
/// - `.allFinished` the scheduler says while a completion is still being announced (its row being committed) waits
///   for that completion's `.finished`, and is emitted only if the scheduler is still idle then; a task that
///   starts withdraws it.
/// - A caller waiting for the announcements to drain (``DownloadManager/close()``) is resumed when the last one
///   being announced is done.
///
/// Generic over the completion and the waiter so its table tests need neither a task nor a continuation.
struct CompletionAnnouncements<Completion, Waiter> {
    typealias Handler = @Sendable (Completion) -> Void

    /// What to do once a completion was announced.
    struct Announced {
        /// Emit `.allFinished` (after this completion's `.finished` and handlers).
        var emitsAllFinished: Bool
        /// The waiters to resume: no completion is being announced any more.
        var drained: [Waiter]
    }

    /// The handler of every completion.
    private(set) var handler: Handler?
    private var taskHandlers: [String: Handler] = [:]
    /// Completions recovered at start, held for the first handler.
    private(set) var recovered: [Completion] = []
    /// Completions whose row is being committed before their `.finished` is emitted.
    private(set) var beingAnnounced = 0
    /// The scheduler said "all finished" and it has not been emitted yet.
    private(set) var allFinishedHeldBack = false
    private var waiters: [Waiter] = []

    /// A completion found at start, for the first handler.
    mutating func recover(_ completion: Completion) {
        recovered.append(completion)
    }

    /// Sets (or, nil, removes) the handler of every completion; returns the recovered completions to call it
    /// with now (they are then no longer held).
    mutating func setHandler(_ handler: Handler?) -> [Completion] {
        self.handler = handler
        guard handler != nil else { return [] }
        defer { recovered = [] }
        return recovered
    }

    /// Sets (or, nil, removes) the handler called once when this task ends.
    mutating func setHandler(taskID: String, _ handler: Handler?) {
        taskHandlers[taskID] = handler
    }

    /// A task was removed: its handler is never called.
    mutating func forget(taskID: String) {
        taskHandlers[taskID] = nil
    }

    /// The handlers to call with the end of this task, in order (its own one is then forgotten).
    mutating func handlers(forTask taskID: String) -> [Handler] {
        [handler, taskHandlers.removeValue(forKey: taskID)].compactMap { $0 }
    }

    /// A task started: an `.allFinished` held back is no longer true.
    mutating func taskStarted() {
        allFinishedHeldBack = false
    }

    /// The scheduler said "all finished": whether to emit `.allFinished` now (no completion being announced and
    /// the scheduler still idle), else it is held back.
    mutating func allFinished(schedulerIsIdle: Bool) -> Bool {
        allFinishedHeldBack = true
        return allFinishedIsDue(schedulerIsIdle: schedulerIsIdle)
    }

    /// A completion starts being announced (its row is committed first); `schedulerSaidAllFinished` when the
    /// scheduler's answer to its end was "all finished", held back until it is announced.
    mutating func announcing(schedulerSaidAllFinished: Bool) {
        if schedulerSaidAllFinished { allFinishedHeldBack = true }
        beingAnnounced += 1
    }

    /// A completion's row is committed and it is announced now: whether `.allFinished` follows it, and whom to
    /// resume.
    mutating func announced(schedulerIsIdle: Bool) -> Announced {
        beingAnnounced -= 1
        let emits = allFinishedIsDue(schedulerIsIdle: schedulerIsIdle)
        guard beingAnnounced == 0 else { return Announced(emitsAllFinished: emits, drained: []) }
        defer { waiters = [] }
        return Announced(emitsAllFinished: emits, drained: waiters)
    }

    /// Whether a caller must wait for completions still being announced.
    var isAnnouncing: Bool { beingAnnounced > 0 }

    /// A caller waits for the announcements to drain (only while ``isAnnouncing``).
    mutating func wait(_ waiter: Waiter) {
        waiters.append(waiter)
    }

    /// The one rule for a held-back `.allFinished`: said, nothing being announced, still idle. Emitting clears it.
    private mutating func allFinishedIsDue(schedulerIsIdle: Bool) -> Bool {
        guard allFinishedHeldBack, beingAnnounced == 0, schedulerIsIdle else { return false }
        allFinishedHeldBack = false
        return true
    }
}
