import DownloadKit
import DownloadKitManager
import DownloadKitSession

/// Something the manager reported about a task (what the daemon turns into durable events).
enum TaskFact: Sendable {
    /// A state change (`stateChanged`): waiting, running, paused, cancelled. Completed and failed come as
    /// ``finished(_:_:)`` and ``failed(_:)``, which carry the details.
    case state(String, ManagedTaskState)
    /// The file is complete.
    case finished(ManagedTask, DownloadResult?)
    /// The transfer failed (the task's stored error says why).
    case failed(ManagedTask)
    /// The task was removed.
    case removed(String)

    var taskID: String {
        switch self {
        case .state(let id, _), .removed(let id): return id
        case .finished(let task, _), .failed(let task): return task.id
        }
    }
}

/// The one rule for what gets logged: which event a fact adds, given the task's last logged event.
///
/// A fact that would repeat the last logged kind adds nothing, and once `finished` is logged only
/// `removed` follows. That makes logging idempotent across restarts: after kill -9 the manager may
/// report a transition again (a task restarted that was running, or finished again because its row
/// was written after the event), and the reconciliation on startup may add what the log missed.
enum EventRules {
    static func kind(for fact: TaskFact, last: SessionEventKind?) -> SessionEventKind? {
        if last == .finished, case .removed = fact { return .removed }
        if last == .finished { return nil }
        let next: SessionEventKind?
        switch fact {
        case .state(_, .waiting):
            switch last {
            case nil: next = .queued
            case .paused?, .failed?, .cancelled?: next = .resumed
            default: next = nil  // back in line because of the limit or the network
            }
        case .state(_, .running): next = .started
        case .state(_, .paused): next = .paused
        case .state(_, .cancelled): next = .cancelled
        case .state(_, .completed), .state(_, .failed): next = nil  // reported by .finished / .failed
        case .finished: next = .finished
        case .failed: next = .failed
        case .removed: next = .removed
        }
        return next == last ? nil : next
    }

    /// The facts the log is missing when a session opens: tasks never logged (queued), tasks whose end
    /// was not logged (finished, failed, cancelled — the daemon died between the manager's write and the
    /// log's), and logged tasks that no longer exist (removed).
    static func reconcile(tasks: [ManagedTask], lastLogged: [String: SessionEventKind]) -> [TaskFact] {
        var facts: [TaskFact] = []
        var present = Set<String>()
        for task in tasks {
            present.insert(task.id)
            let last = lastLogged[task.id]
            if last == nil { facts.append(.state(task.id, .waiting)) }
            switch task.state {
            case .completed: facts.append(.finished(task, nil))
            case .failed: facts.append(.failed(task))
            case .cancelled: facts.append(.state(task.id, .cancelled))
            case .paused: facts.append(.state(task.id, .paused))
            case .waiting, .running: break
            }
        }
        for id in lastLogged.keys.sorted() where !present.contains(id) { facts.append(.removed(id)) }
        return facts
    }
}
