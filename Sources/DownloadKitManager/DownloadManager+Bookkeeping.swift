@_spi(DownloadKitInternal) import DownloadKit
import Foundation
import HTTPClient
import HTTPWire
import Logging

/// Bookkeeping: restoring tasks, the indexes, state changes, events and writing rows to the store.
extension DownloadManager {
    // MARK: - Internals: bookkeeping

    func restore() async throws {
        let loadedTasks: [ManagedTask]
        do {
            loadedTasks = try await store.loadTasks()
        } catch {
            throw DownloadManagerError(.storage, "cannot read the tasks in \(store.location): \(error)")
        }
        // One readdir per directory the tasks download into: a directory without any partial spares each
        // of its tasks the working-file names (an MD5 of the URL) and a stat — 10,000 queued tasks that never
        // started restore without either (issue #18).
        var holdsPartials: [String: Bool] = [:]
        func mayHavePartial(_ task: ManagedTask) -> Bool {
            let directory = WorkingFiles.directory(of: task.destination, workingDirectory: nil)
            if let known = holdsPartials[directory] { return known }
            let found = FileSystem.containsName(endingWith: ".dkpart", in: directory)
            holdsPartials[directory] = found
            return found
        }
        for loaded in loadedTasks {
            var task = loaded
            if task.state == .waiting || task.state == .running {
                let stored = task
                // The durable bytes on disk are the truth after a crash (the row lags by a few seconds).
                if mayHavePartial(task), let size = partialPaths(task).first.flatMap(Self.fileSize) { task.bytesReceived = size }
                if task.state == .running, let finished = finishedBeforeTheRowWasUpdated(task) {
                    task.markCompleted(finished)
                    announcements.recover(TaskCompletion(task: task, result: .success(finished)))
                    logger.notice("task \(task.id) had finished before the last stop (\(finished.path)); not downloading it again")
                } else if configuration.startsRestoredTasks {
                    task.state = .waiting
                    scheduler.restore(
                        Scheduler.Entry(
                            id: task.id, priority: task.priority.rawValue, order: task.queueOrder,
                            requiresUnmeteredNetwork: task.requiresUnmeteredNetwork))
                } else {
                    task.state = .paused
                }
                if task != stored { pendingWrites.rowChanged(task.id) }
            }
            tasks.insert(task)
        }
        logger.debug("restored \(tasks.count) tasks from \(stateDirectory)")
        try await commit()
        apply(scheduler.schedule())
        try await commit()
    }

    func existing(_ id: String) throws -> ManagedTask {
        guard let task = tasks[id] else { throw DownloadManagerError(.unknownTask, "no task \(id)") }
        return task
    }

    func ensureOpen() throws {
        if isClosed { throw DownloadManagerError(.closed, "the manager is closed") }
    }

    func validate(url: String) throws {
        do {
            let parsed = try HTTPURL(url)
            _ = parsed
        } catch {
            throw DownloadManagerError(.invalidURL, "not an http(s) URL: \(HTTPURL.redacting(url)) (\(error.detail))")
        }
    }

    func store(_ task: ManagedTask) {
        var task = task
        task.updatedAt = Date()
        tasks.update(task)
        pendingWrites.rowChanged(task.id)
    }

    func setState(_ id: String, _ state: ManagedTaskState) {
        guard var task = tasks[id], task.state != state else { return }
        task.state = state
        store(task)
        emit(.stateChanged(taskID: id, state: state))
    }

    func emit(_ event: ManagerEvent) {
        broadcaster.yield(event)
        eventHandler?(event)
    }

    /// Takes every changed row and deletion for one transaction (they are no longer owed), with the rows read
    /// from the task table now.
    func takeChanges() -> (batch: PendingWrites.Batch, records: [ManagedTask])? {
        guard let batch = pendingWrites.take() else { return nil }
        return (batch, batch.rows.compactMap { tasks[$0] })
    }

    /// A transaction that failed: its rows are owed again, for the next commit.
    func unwritten(_ batch: PendingWrites.Batch) {
        pendingWrites.unwritten(batch) { tasks[$0] != nil }
    }

    /// Writes every changed row and deletion in one transaction on the store's thread and waits for it
    /// (the API's changes: the caller learns of a storage failure).
    ///
    /// The batch is handed to the store here, on the actor, in the same turn as it is taken, and then waited
    /// for. Through the store's async `save` it was handed over only after the call left the actor (a
    /// nonisolated async function runs on the global executor), and a newer row of the same task taken
    /// meanwhile by ``commitInBackground()`` (a transfer starting, failing, completing) could be written
    /// first — then overwritten by this older one: a failed task read back as waiting.
    func commit() async throws {
        guard let changes = takeChanges() else { return }
        let failure = LockedValue<(any Error)?>(nil)
        store.saveInBackground(changes.records, deleting: Array(changes.batch.deletions)) { error in
            failure.withLock { $0 = error }
        }
        // Every write handed over before this returns has finished, this one included: its failure is known.
        await store.drain()
        if let error = failure.withLock({ $0 }) {
            unwritten(changes.batch)
            throw DownloadManagerError(.storage, "cannot write the tasks: \(error)")
        }
    }

    /// Like ``commit()`` but logs a failure instead of throwing it.
    func commitLogging() async {
        do {
            try await commit()
        } catch {
            logger.error("\(error)")
        }
    }

    /// Hands every change to the store's thread without waiting (progress, transfer bookkeeping); writes
    /// keep their order, and a failed one leaves its rows dirty for the next commit.
    func commitInBackground() {
        guard let changes = takeChanges() else { return }
        let logger = logger
        store.saveInBackground(changes.records, deleting: Array(changes.batch.deletions)) { [weak self] error in
            logger.error("cannot write the tasks: \(error)")
            Task { await self?.unwritten(changes.batch) }
        }
    }

    /// Writes bytes received by running tasks (the flusher, at most every `progressPersistInterval`).
    func flushProgress() {
        pendingWrites.flushProgress()
        commitInBackground()
    }

    /// The task's temp file, its resume info and its segment journal (what `remove` and `cancel` delete).
    /// The result of a task whose file was renamed into place but whose row still says waiting or running:
    /// no working files remain, and the file at its destination carries the task's URL in
    /// `user.downloadkit.validators` (written on the partial before the rename, see `FinishedFileValidators`).
    nonisolated func finishedBeforeTheRowWasUpdated(_ task: ManagedTask) -> DownloadResult? {
        guard partialPaths(task).allSatisfy({ !FileSystem.exists($0) }) else { return nil }
        let path: String
        if let known = task.path {
            path = known
        } else if case .file(let file) = task.destination {
            path = file
        } else {
            return nil  // a directory destination's name was decided by the lost run
        }
        guard let url = try? HTTPURL(task.originalURL),
            FinishedFileValidators.recordedURL(at: path) == url.withoutUserinfo.absoluteString,
            let size = Self.fileSize(path)
        else { return nil }
        let validators = FinishedFileValidators.read(at: path)
        return DownloadResult(
            path: path, bytes: size, resumedFrom: size, bytesTransferred: 0, finalURL: task.originalURL,
            checksumHex: nil, isResumable: true, entityTag: validators.entityTag, lastModified: validators.lastModified)
    }

    /// The partial data a cancel or remove of `task` may delete: none when it is not the newest task of
    /// its URL and another task has the same working files (a new task made by
    /// ``TaskRequest/reusesLiveTaskOnly`` after this one stopped may be resuming from them). The newest
    /// task of a URL (the usual, only one) is decided without a scan.
    func ownedPartialPaths(_ task: ManagedTask) -> [String] {
        let paths = partialPaths(task)
        guard !tasks.isNewestOfItsURL(task) else { return paths }
        let shared = tasks.values.contains {
            $0.id != task.id && $0.originalURL == task.originalURL && partialPaths($0) == paths
        }
        return shared ? [] : paths
    }

    nonisolated func partialPaths(_ task: ManagedTask) -> [String] {
        guard let url = try? HTTPURL(task.originalURL) else { return [] }
        let working = WorkingFiles(destination: task.destination, workingDirectory: nil, url: url)
        return [working.partial, working.resumeInfo, working.journal]
    }

    static func fileSize(_ path: String) -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_size)
    }
}
