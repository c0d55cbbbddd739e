@_spi(DownloadKitInternal) import DownloadKit
import Foundation
import HTTPClient
import HTTPWire
import Logging

/// The manager's public operations: enqueueing and control (pause, resume, cancel, remove, limits,
/// priorities, moves, URL refresh, close), and the bulk steps they share.
extension DownloadManager {
    // MARK: - Enqueueing

    /// Adds a task and returns its id; if a task with the same URL (original or current) or the same file
    /// id exists, returns that task's id and changes nothing (``resume(taskID:)`` restarts it).
    ///
    /// - Parameters:
    ///   - url: An http or https URL; it stays the task's identity through redirects and URL refreshes.
    ///   - fileID: The caller's id for the file (de-duplication; names the file under `.fileID` naming).
    ///   - destination: Where the file goes; default: the download directory, named by `fileID` or the
    ///     URL's MD5 plus its extension (YCDownloadManager's rule).
    ///   - priority: Higher starts first.
    ///   - checksum: Verified before the file is moved into place.
    ///   - headers: Extra request header fields.
    ///   - group: A group name for group progress and group pause/resume/cancel.
    ///   - metadata: Caller data kept with the task.
    ///   - requiresUnmeteredNetwork: Run only on an unmetered network.
    ///   - rateLimit: This task's limit in bytes per second.
    /// - Throws: ``DownloadManagerError``: `invalidURL`, `storage`, `closed`.
    @discardableResult
    public func enqueue(
        url: String, fileID: String? = nil, destination: DownloadDestination? = nil,
        priority: DownloadPriority = .normal, checksum: Checksum? = nil, headers: [String: String] = [:],
        group: String? = nil, metadata: [String: String] = [:], requiresUnmeteredNetwork: Bool = false,
        rateLimit: Int? = nil
    ) async throws -> String {
        try await enqueue([
            TaskRequest(
                url: url, fileID: fileID, destination: destination, priority: priority, checksum: checksum,
                headers: headers, group: group, metadata: metadata, requiresUnmeteredNetwork: requiresUnmeteredNetwork,
                rateLimit: rateLimit)
        ])[0]
    }

    /// Adds many tasks in one transaction (same rules as the single form); returns their ids in order.
    /// - Throws: ``DownloadManagerError``: `invalidURL`, `invalidPieceChecksums` (a request's piece table
    ///   with a length that is not positive or a digest of the wrong size; nothing is added), `storage`,
    ///   `closed`.
    @discardableResult
    public func enqueue(_ requests: [TaskRequest]) async throws -> [String] {
        try ensureOpen()
        for request in requests {
            try validate(url: request.url)
            for mirror in request.mirrors { try validate(url: mirror) }
            do throws(DownloadError) {
                try request.pieceChecksums?.validate()
            } catch {
                throw DownloadManagerError(.invalidPieceChecksums, "\(HTTPURL.redacting(request.url)): \(error.detail)")
            }
        }
        var ids: [String] = []
        ids.reserveCapacity(requests.count)
        var actions: [Scheduler.Action] = []
        let now = Date()
        // Room for the batch up front: growing these tables one rehash at a time was an eighth of a
        // 10,000-task enqueue.
        tasks.reserveCapacity(adding: requests.count)
        pendingWrites.reserveCapacity(adding: requests.count)
        var identifiers = TaskIdentifier.Generator(expected: requests.count)
        for request in requests {
            if let existing = tasks.id(forURL: request.url) ?? request.fileID.flatMap({ tasks.id(forFileID: $0) }),
                !request.reusesLiveTaskOnly
                    || !(tasks[existing].map { [.completed, .failed, .cancelled].contains($0.state) } ?? false)
            {
                ids.append(existing)
                actions += requeueIfFileGone(existing)
                continue
            }
            let id = identifiers.next()
            let destination = DestinationColumns.absolute(
                request.destination ?? .directory(
                    configuration.defaultDownloadDirectory ?? stateDirectory + "/Downloads",
                    naming: request.fileID.map { .fileID($0) } ?? .md5OfURL))
            var path: String?
            if case .file(let file) = destination { path = file }
            var task = ManagedTask(
                id: id, originalURL: request.url, currentURL: request.url, fileID: request.fileID,
                destination: destination, path: path, state: .waiting, bytesReceived: 0, totalBytes: nil,
                priority: request.priority, queueOrder: 0, group: request.group, checksum: request.checksum,
                headers: request.headers, metadata: request.metadata,
                requiresUnmeteredNetwork: request.requiresUnmeteredNetwork, rateLimit: request.rateLimit, error: nil,
                createdAt: now, updatedAt: now, finishedAt: nil, connections: request.connections,
                mirrors: request.mirrors, connectionsPerSource: request.connectionsPerSource,
                pieceChecksums: request.pieceChecksums)
            if request.startsPaused {
                // Never handed to the scheduler: `resume` puts it at the end of the line, as for any paused task.
                task.state = .paused
            } else {
                let (order, newActions) = scheduler.resume(
                    id, priority: request.priority.rawValue, requiresUnmeteredNetwork: request.requiresUnmeteredNetwork)
                task.queueOrder = order
                actions += newActions
            }
            tasks.insert(task)
            pendingWrites.rowChanged(id)
            ids.append(id)
            emit(.stateChanged(taskID: id, state: task.state))
        }
        apply(actions)
        try await commit()
        return ids
    }

    // MARK: - Control

    /// Pauses a waiting or running task, keeping its bytes. Other states are left alone.
    public func pause(taskID: String) async throws {
        try ensureOpen()
        try pause([existing(taskID)])
        try await commit()
    }

    /// Puts a paused, failed or cancelled task at the end of the waiting line (seed 001: it joins the line
    /// now). Waiting, running and completed tasks are left alone.
    public func resume(taskID: String) async throws {
        try ensureOpen()
        try resume([existing(taskID)])
        try await commit()
    }

    /// Stops a task and deletes its partial data and resume info; the task stays, `cancelled`. Returns once
    /// the files are gone.
    public func cancel(taskID: String) async throws {
        try ensureOpen()
        try cancel([existing(taskID)])
        try await commit()
        await settle([taskID])
    }

    /// Stops a task, deletes its partial data, resume info and row (and its finished file when
    /// `deletingFile`).
    public func remove(taskID: String, deletingFile: Bool = false) async throws {
        try ensureOpen()
        try remove([existing(taskID)], deletingFile: deletingFile)
        try await commit()
        await settle([taskID])
    }

    /// Pauses every waiting and running task.
    public func pauseAll() async throws { try ensureOpen(); try pause(Array(tasks.values)); try await commit() }
    /// Resumes every paused, failed or cancelled task (in their old order).
    public func resumeAll() async throws { try ensureOpen(); try resume(allTasks()); try await commit() }
    /// Cancels every unfinished task.
    public func cancelAll() async throws {
        try ensureOpen()
        let selected = Array(tasks.values)
        try cancel(selected)
        try await commit()
        await settle(selected.map(\.id))
    }
    /// Removes every task.
    public func removeAll(deletingFiles: Bool = false) async throws {
        try ensureOpen()
        let selected = Array(tasks.values)
        try remove(selected, deletingFile: deletingFiles)
        try await commit()
        await settle(selected.map(\.id))
    }

    /// Pauses the group's waiting and running tasks.
    public func pause(group: String) async throws { try ensureOpen(); try pause(tasks(inGroup: group)); try await commit() }
    /// Resumes the group's paused, failed and cancelled tasks, in their order.
    public func resume(group: String) async throws { try ensureOpen(); try resume(tasks(inGroup: group)); try await commit() }
    /// Cancels the group's unfinished tasks.
    public func cancel(group: String) async throws {
        try ensureOpen()
        let selected = tasks(inGroup: group)
        try cancel(selected)
        try await commit()
        await settle(selected.map(\.id))
    }

    /// Waits until the stopped transfers of these tasks have ended and their files are deleted.
    func settle(_ ids: [String]) async {
        for id in ids {
            if let stop = stopping[id]?.task { await stop.value }
        }
    }

    /// Changes the concurrency limit now; lowering it sends the tasks that joined the line last back to waiting.
    public func setMaxConcurrent(_ limit: Int) async throws {
        try ensureOpen()
        apply(scheduler.setMaxConcurrent(limit))
        try await commit()
    }

    /// Changes a task's priority (its place among equals is kept).
    public func setPriority(taskID: String, _ priority: DownloadPriority) async throws {
        try ensureOpen()
        var task = try existing(taskID)
        task.priority = priority
        store(task)
        apply(scheduler.setPriority(taskID, priority.rawValue))
        try await commit()
    }

    /// Moves a waiting task to `position` in the waiting line (0 = next). It takes the priority of the task
    /// it displaces, so it lands exactly there. The order survives restarts.
    /// - Throws: `invalidState` when the task is not waiting.
    public func move(taskID: String, toPosition position: Int) async throws {
        try ensureOpen()
        _ = try existing(taskID)
        guard let (entry, renumbered, actions) = scheduler.move(taskID, toPosition: position) else {
            throw DownloadManagerError(.invalidState, "task \(taskID) is not waiting")
        }
        for moved in [entry] + renumbered {
            guard var task = tasks[moved.id] else { continue }
            task.priority = DownloadPriority(rawValue: moved.priority)
            task.queueOrder = moved.order
            store(task)
        }
        apply(actions)
        try await commit()
    }

    /// Sets the limit for all transfers together (nil: unlimited), effective at once.
    public func setGlobalRateLimit(_ bytesPerSecond: Int?) {
        globalRateLimit = bytesPerSecond
        globalLimiter.setRate(bytesPerSecond: bytesPerSecond ?? TokenBucket.unlimitedRate)
    }

    /// The global limit now.
    public var currentGlobalRateLimit: Int? { globalRateLimit }

    /// Sets one task's limit (nil: unlimited), effective at once when it runs.
    public func setRateLimit(taskID: String, bytesPerSecond: Int?) async throws {
        try ensureOpen()
        var task = try existing(taskID)
        task.rateLimit = bytesPerSecond
        store(task)
        active[taskID]?.limiter.setRate(bytesPerSecond: bytesPerSecond ?? TokenBucket.unlimitedRate)
        try await commit()
    }

    /// Allows or forbids metered networks for all tasks (iOS `allowsCellularAccess`); running tasks that
    /// are no longer allowed go back to waiting.
    public func setAllowsMeteredNetwork(_ allowed: Bool) async throws {
        try ensureOpen()
        apply(scheduler.setAllowsMeteredNetwork(allowed))
        try await commit()
    }

    /// Gives a task a new URL (expiring signed URLs, seed 002), keeping the task, its id and its bytes. A
    /// running transfer restarts from its durable bytes at the new URL.
    public func refreshURL(taskID: String, newURL: String) async throws {
        try ensureOpen()
        try validate(url: newURL)
        let task = try existing(taskID)
        try await replaceSources(of: task, url: newURL, mirrors: task.mirrors)
    }

    /// Replaces a task's URL and mirrors at once (aria2's `changeUri`): what ``refreshURL(taskID:newURL:)`` and
    /// ``setMirrors(taskID:mirrors:)`` do, with one restart of a running transfer instead of two. Every URL must
    /// be http(s) (else `invalidURL` and nothing changes).
    public func setSources(taskID: String, url: String, mirrors: [String]) async throws {
        try ensureOpen()
        try validate(url: url)
        for mirror in mirrors { try validate(url: mirror) }
        try await replaceSources(of: try existing(taskID), url: url, mirrors: mirrors)
    }

    /// Replaces a task's mirrors (``ManagedTask/mirrors``; each an http(s) URL, else `invalidURL` and
    /// nothing changes), keeping the task, its id and its bytes. A running transfer restarts from its
    /// durable bytes with the new sources.
    public func setMirrors(taskID: String, mirrors: [String]) async throws {
        try ensureOpen()
        for mirror in mirrors { try validate(url: mirror) }
        let task = try existing(taskID)
        try await replaceSources(of: task, url: task.currentURL, mirrors: mirrors)
    }

    /// The one step behind the three above: `task` with `url` and `mirrors` (nothing when both are its own),
    /// keeping the URL index true — its old current URL stops naming it (the original one always does), the new
    /// one names it unless another task has it — stored, and a running transfer restarted once.
    private func replaceSources(of task: ManagedTask, url: String, mirrors: [String]) async throws {
        guard task.currentURL != url || task.mirrors != mirrors else { return }
        var task = task
        task.currentURL = url
        task.mirrors = mirrors
        try await storeRestartingTransfer(task)
    }

    /// Sets a task's connection count and its connections per source (``ManagedTask/connections``,
    /// ``ManagedTask/connectionsPerSource``; each 1…64, or nil for the configuration's; anything else is
    /// `invalidState` and nothing changes), keeping the task, its id and its bytes. A running transfer
    /// restarts from its durable bytes with the new counts (as aria2 restarts a download whose `split`
    /// changes).
    public func setConnections(taskID: String, connections: Int?, perSource: Int?) async throws {
        try ensureOpen()
        for (name, count) in [("connections", connections), ("connectionsPerSource", perSource)] {
            if let count, !(1...64).contains(count) {
                throw DownloadManagerError(.invalidState, "\(name) must be 1 to 64, not \(count)")
            }
        }
        var task = try existing(taskID)
        guard task.connections != connections || task.connectionsPerSource != perSource else { return }
        task.connections = connections
        task.connectionsPerSource = perSource
        try await storeRestartingTransfer(task)
    }

    /// Stores a task whose URL, sources or connection counts changed and commits it; its running transfer,
    /// if any, restarts from its durable bytes with them (the rule of ``refreshURL(taskID:newURL:)``,
    /// ``setMirrors(taskID:mirrors:)`` and ``setConnections(taskID:connections:perSource:)``).
    private func storeRestartingTransfer(_ task: ManagedTask) async throws {
        store(task)
        if active[task.id] != nil {
            stopTransfer(task.id)
            launch(task.id)
        }
        try await commit()
    }

    /// Stops every transfer (keeping its bytes and its state, so a new manager resumes it), writes
    /// everything, announces every completion still being committed (its `.finished` and completion
    /// handler), and ends the event streams. The manager refuses further changes.
    public func close() async {
        guard !isClosed else { return }
        isClosed = true
        networkWatcher?.cancel()
        flusher?.cancel()
        for id in Array(active.keys) { stopTransfer(id) }
        for (_, stop) in stopping { await stop.task.value }
        pendingWrites.progressJoinsRows()
        await commitLogging()
        await store.drain()
        while announcements.isAnnouncing {
            await withCheckedContinuation { announcements.wait($0) }
        }
        broadcaster.finish()
    }

    // MARK: - Internals: bulk operations

    func pause(_ selected: [ManagedTask]) throws {
        for task in selected where task.state == .waiting || task.state == .running {
            let actions = scheduler.withdraw(task.id)
            stopTransfer(task.id)
            setState(task.id, .paused)
            apply(actions)
        }
    }

    /// A completed task enqueued again whose file was deleted is downloaded again (never reported as
    /// "already done" without its file). Returns the scheduler's actions.
    func requeueIfFileGone(_ id: String) -> [Scheduler.Action] {
        guard var task = tasks[id], task.state == .completed else { return [] }
        if let path = task.path, FileManager.default.fileExists(atPath: path) { return [] }
        let (order, actions) = scheduler.resume(
            task.id, priority: task.priority.rawValue, requiresUnmeteredNetwork: task.requiresUnmeteredNetwork)
        task.queueOrder = order
        task.state = .waiting
        task.bytesReceived = 0
        task.finishedAt = nil
        task.error = nil
        if case .directory = task.destination { task.path = nil }
        store(task)
        emit(.stateChanged(taskID: task.id, state: .waiting))
        return actions
    }

    func resume(_ selected: [ManagedTask]) throws {
        for var task in selected where [.paused, .failed, .cancelled].contains(task.state) {
            let (order, actions) = scheduler.resume(
                task.id, priority: task.priority.rawValue, requiresUnmeteredNetwork: task.requiresUnmeteredNetwork)
            task.queueOrder = order
            task.state = .waiting
            task.error = nil
            store(task)
            emit(.stateChanged(taskID: task.id, state: .waiting))
            apply(actions)
        }
    }

    func cancel(_ selected: [ManagedTask]) throws {
        for task in selected where task.state != .completed && task.state != .cancelled {
            let actions = scheduler.withdraw(task.id)
            stopTransfer(task.id, deleting: ownedPartialPaths(task))
            guard var current = tasks[task.id] else { continue }
            current.bytesReceived = 0
            current.state = .cancelled
            store(current)
            emit(.stateChanged(taskID: task.id, state: .cancelled))
            apply(actions)
        }
    }

    func remove(_ selected: [ManagedTask], deletingFile: Bool) throws {
        for task in selected {
            var paths = ownedPartialPaths(task)
            if deletingFile, task.state == .completed, let path = task.path { paths.append(path) }
            let actions = scheduler.withdraw(task.id)
            stopTransfer(task.id, deleting: paths)
            tasks.remove(task.id)
            pendingWrites.removed(task.id)
            progressEvents.forget(task.id)
            announcements.forget(taskID: task.id)
            emit(.removed(taskID: task.id))
            apply(actions)
        }
    }
}
