@_spi(DownloadKitInternal) import DownloadKit
import HTTPClient

/// One task of a ``DownloadManager``, as a handle: await its end or follow its events.
///
/// ```swift
/// let task = try await manager.enqueueTask(url: "https://example.com/a.iso", destination: .file("/data/a.iso"))
/// for await event in task.events { print(event) }     // this task's events only
/// let done = try await task.result()                  // the completed task: done.path
/// ```
public struct ManagedTaskHandle: Sendable, Hashable {
    /// The task's id in the manager.
    public let id: String
    /// The manager that owns the task.
    public let manager: DownloadManager

    public static func == (lhs: ManagedTaskHandle, rhs: ManagedTaskHandle) -> Bool {
        lhs.id == rhs.id && lhs.manager === rhs.manager
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
        hasher.combine(ObjectIdentifier(manager))
    }

    /// This task's events from now on (state changes, progress, `finished`, `failed`, `removed`); like
    /// ``DownloadManager/events``, a slow consumer loses only progress.
    public var events: AsyncFilterSequence<EventSequence<ManagerEvent>> {
        let id = self.id
        return manager.events.filter { event in event.taskID == id }
    }

    /// Waits until the task completes and returns it (its ``ManagedTask/path`` is the file).
    ///
    /// A paused task is waited for (it may be resumed); a task that fails, is cancelled or removed, or
    /// whose manager closes, throws.
    /// - Throws: ``DownloadError``: the task's failure, or `.cancelled` when it was cancelled or removed
    ///   or the manager closed.
    public func result() async throws(DownloadError) -> ManagedTask {
        // Subscribe first, then look: an end between the two is seen by one or the other.
        let events = manager.events
        if let settled = try await settledTask() { return settled }
        for await event in events where event.taskID == id {
            switch event {
            case .finished:
                if let settled = try await settledTask() { return settled }
            case .failed(_, let error):
                throw error
            case .removed:
                throw DownloadError(.cancelled, "task \(id) was removed")
            case .stateChanged(_, .cancelled):
                throw DownloadError(.cancelled, "task \(id) was cancelled")
            default:
                continue
            }
        }
        if let settled = try await settledTask() { return settled }
        throw DownloadError(.cancelled, "the manager closed before task \(id) ended")
    }

    /// The task when it has already ended (completed: returned; failed or cancelled: thrown).
    private func settledTask() async throws(DownloadError) -> ManagedTask? {
        guard let task = await manager.task(id) else {
            throw DownloadError(.cancelled, "task \(id) is not in the manager (removed)")
        }
        switch task.state {
        case .completed:
            return task
        case .failed:
            throw task.error?.downloadError ?? DownloadError(.transport, "task \(id) failed")
        case .cancelled:
            throw DownloadError(.cancelled, "task \(id) was cancelled")
        case .waiting, .running, .paused:
            return nil
        }
    }
}

extension ManagerEvent {
    /// The task an event is about; nil for manager-wide events.
    public var taskID: String? {
        switch self {
        case .stateChanged(let id, _), .progress(let id, _), .finished(let id, _), .failed(let id, _), .removed(let id):
            return id
        case .allFinished, .networkChanged:
            return nil
        }
    }
}

extension DownloadManager {
    /// Enqueues one task (the rules of ``enqueue(url:fileID:destination:priority:checksum:headers:group:metadata:requiresUnmeteredNetwork:rateLimit:)``)
    /// and returns a handle to it.
    public func enqueueTask(
        url: String, fileID: String? = nil, destination: DownloadDestination? = nil,
        priority: DownloadPriority = .normal, checksum: Checksum? = nil, headers: [String: String] = [:],
        group: String? = nil, metadata: [String: String] = [:], requiresUnmeteredNetwork: Bool = false,
        rateLimit: Int? = nil
    ) async throws -> ManagedTaskHandle {
        let id = try await enqueue(
            url: url, fileID: fileID, destination: destination, priority: priority, checksum: checksum, headers: headers,
            group: group, metadata: metadata, requiresUnmeteredNetwork: requiresUnmeteredNetwork, rateLimit: rateLimit)
        return ManagedTaskHandle(id: id, manager: self)
    }

    /// A handle to an existing task.
    /// - Throws: ``DownloadManagerError`` `unknownTask`.
    public func handle(forTask id: String) throws -> ManagedTaskHandle {
        guard task(id) != nil else { throw DownloadManagerError(.unknownTask, "no task has the id \(id)") }
        return ManagedTaskHandle(id: id, manager: self)
    }
}
