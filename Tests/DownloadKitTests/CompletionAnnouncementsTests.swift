@testable import DownloadKitManager
import Synchronization
import Testing

/// Who is told of a task's end, and when (CompletionAnnouncements): the held-back `.allFinished`, the drained
/// waiters, the recovered completions and the handlers.
@Suite("Completion announcements")
struct CompletionAnnouncementsTests {
    typealias Announcements = CompletionAnnouncements<String, Int>

    /// One thing the manager reports.
    enum Step {
        /// The scheduler said "all finished" outside a completion (a failure, a cancel), idle or not.
        case allFinished(idle: Bool)
        /// A completion starts being announced; whether the scheduler's answer to it was "all finished".
        case announcing(allFinished: Bool)
        /// A completion is announced, the scheduler idle or not then.
        case announced(idle: Bool)
        case started
        /// A caller waits for the announcements to drain.
        case wait(Int)
    }

    struct Row {
        var name: String
        var steps: [Step]
        /// The steps after which `.allFinished` is emitted (indexes in `steps`).
        var emitsAt: [Int]
        /// The waiters resumed, by the step that resumed them.
        var resumed: [Int: [Int]]
        var heldBackAfter: Bool
    }

    static let rows: [Row] = [
        Row(
            name: "all finished with nothing being announced is emitted at once", steps: [.allFinished(idle: true)],
            emitsAt: [0], resumed: [:], heldBackAfter: false),
        Row(
            name: "a completion's own all finished follows its announcement",
            steps: [.announcing(allFinished: true), .announced(idle: true)], emitsAt: [1], resumed: [:],
            heldBackAfter: false),
        Row(
            name: "two completions ending together: all finished only after the last one's announcement",
            steps: [
                .announcing(allFinished: false), .announcing(allFinished: true), .announced(idle: true),
                .announced(idle: true),
            ],
            emitsAt: [3], resumed: [:], heldBackAfter: false),
        Row(
            name: "all finished said outside while a completion is announced waits for it",
            steps: [.announcing(allFinished: false), .allFinished(idle: true), .announced(idle: true)],
            emitsAt: [2], resumed: [:], heldBackAfter: false),
        Row(
            name: "a task started meanwhile withdraws the held-back all finished",
            steps: [.announcing(allFinished: true), .started, .announced(idle: false)], emitsAt: [], resumed: [:],
            heldBackAfter: false),
        Row(
            name: "not idle any more when announced: held back, emitted when the scheduler says it again",
            steps: [.announcing(allFinished: true), .announced(idle: false), .allFinished(idle: true)],
            emitsAt: [2], resumed: [:], heldBackAfter: false),
        Row(
            name: "all finished while not idle stays held back",
            steps: [.allFinished(idle: false)], emitsAt: [], resumed: [:], heldBackAfter: true),
        Row(
            name: "waiters are resumed by the last announcement only",
            steps: [
                .announcing(allFinished: false), .announcing(allFinished: false), .wait(1), .announced(idle: false),
                .wait(2), .announced(idle: false), .announcing(allFinished: false), .announced(idle: false),
            ],
            emitsAt: [], resumed: [5: [1, 2]], heldBackAfter: false),
    ]

    @Test("each sequence emits all finished and resumes the waiters when due", arguments: rows)
    func table(_ row: Row) {
        var announcements = Announcements()
        var emitsAt: [Int] = []
        var resumed: [Int: [Int]] = [:]
        for (index, step) in row.steps.enumerated() {
            switch step {
            case .allFinished(let idle):
                if announcements.allFinished(schedulerIsIdle: idle) { emitsAt.append(index) }
            case .announcing(let allFinished):
                announcements.announcing(schedulerSaidAllFinished: allFinished)
            case .announced(let idle):
                let announced = announcements.announced(schedulerIsIdle: idle)
                if announced.emitsAllFinished { emitsAt.append(index) }
                if !announced.drained.isEmpty { resumed[index] = announced.drained }
            case .started:
                announcements.taskStarted()
            case .wait(let waiter):
                #expect(announcements.isAnnouncing, "\(row.name): a caller waits only while announcing")
                announcements.wait(waiter)
            }
        }
        #expect(emitsAt == row.emitsAt, "\(row.name)")
        #expect(resumed == row.resumed, "\(row.name)")
        #expect(announcements.allFinishedHeldBack == row.heldBackAfter, "\(row.name)")
        #expect(!announcements.isAnnouncing, "\(row.name)")
    }

    @Test("recovered completions go to the first handler set, once")
    func recoveredForFirstHandler() {
        var announcements = Announcements()
        announcements.recover("a")
        announcements.recover("b")
        #expect(announcements.setHandler(nil) == [], "removing a handler takes nothing")
        #expect(announcements.setHandler { _ in } == ["a", "b"])
        #expect(announcements.setHandler { _ in } == [], "a later handler gets none again")
        #expect(announcements.recovered.isEmpty)
    }

    @Test("a task's own handler is called once after the general one, and never for a task removed")
    func taskHandlers() {
        let calls = Mutex<[String]>([])
        var announcements = Announcements()
        announcements.setHandler(taskID: "t") { id in calls.withLock { $0.append("own " + id) } }
        announcements.setHandler(taskID: "gone") { id in calls.withLock { $0.append("own " + id) } }
        _ = announcements.setHandler { id in calls.withLock { $0.append("all " + id) } }
        announcements.forget(taskID: "gone")
        for id in ["t", "t", "gone"] {
            for handler in announcements.handlers(forTask: id) { handler(id) }
        }
        #expect(calls.withLock { $0 } == ["all t", "own t", "all t", "all gone"])
    }
}

extension CompletionAnnouncementsTests.Row: CustomTestStringConvertible {
    var testDescription: String { name }
}
