/// When a running task's progress becomes a `.progress` event: a task's first progress at once, then at most one
/// per interval; a task whose transfer ended (or that was removed) is forgotten, so its next run starts afresh.
/// Time is an input (monotonic seconds).
struct ProgressEventThrottle {
    /// The shortest time between two events of one task, in seconds.
    let interval: Double
    private var lastEmitted: [String: Double] = [:]

    init(interval: Double) {
        self.interval = interval
    }

    /// Whether this progress of task `id` at `now` is emitted (then the interval starts again from `now`).
    mutating func isDue(_ id: String, now: Double) -> Bool {
        if let last = lastEmitted[id], now - last < interval { return false }
        lastEmitted[id] = now
        return true
    }

    /// The task's transfer ended or the task was removed.
    mutating func forget(_ id: String) {
        lastEmitted[id] = nil
    }
}
