@testable import DownloadKitManager
import Testing

/// When a task's progress becomes a `.progress` event (ProgressEventThrottle).
@Suite("Progress event throttle")
struct ProgressEventThrottleTests {
    /// One progress report (task, monotonic seconds) or a forgotten task, and whether an event is due.
    enum Step: Equatable {
        case progress(String, Double, due: Bool)
        case forget(String)
    }

    static let rows: [(name: String, steps: [Step])] = [
        ("a task's first progress is due at once, whatever the clock",
         [.progress("a", 0, due: true), .progress("b", 0.1, due: true)]),
        ("then at most one per interval, counted from the last one emitted",
         [.progress("a", 10, due: true), .progress("a", 10.4, due: false), .progress("a", 10.5, due: true),
          .progress("a", 10.9, due: false), .progress("a", 11.0, due: true)]),
        ("tasks are throttled each on its own",
         [.progress("a", 10, due: true), .progress("b", 10.2, due: true), .progress("a", 10.3, due: false),
          .progress("b", 10.6, due: false), .progress("b", 10.7, due: true)]),
        ("a task forgotten (its transfer ended) starts afresh",
         [.progress("a", 10, due: true), .forget("a"), .progress("a", 10.1, due: true),
          .progress("a", 10.2, due: false)]),
    ]

    @Test("each sequence of progress reports is emitted when due", arguments: rows.indices)
    func table(_ index: Int) {
        let row = Self.rows[index]
        var throttle = ProgressEventThrottle(interval: 0.5)
        for step in row.steps {
            switch step {
            case .progress(let id, let now, let due):
                #expect(throttle.isDue(id, now: now) == due, "\(row.name): \(id) at \(now)")
            case .forget(let id):
                throttle.forget(id)
            }
        }
    }
}
