@_spi(DownloadKitInternal) import DownloadKit
import Foundation
import HTTPClient
import HTTPWire
import Logging

/// Carrying out the scheduler's actions: starting, stopping and finishing the tasks' transfers.
extension DownloadManager {
    // MARK: - Internals: carrying out the scheduler's actions

    func apply(_ actions: [Scheduler.Action]) {
        for action in actions {
            switch action {
            case .start(let id):
                launch(id)
            case .requeue(let id), .holdForNetwork(let id):
                stopTransfer(id)
                setState(id, .waiting)
            case .allFinished:
                if announcements.allFinished(schedulerIsIdle: scheduler.isIdle) { emit(.allFinished) }
            }
        }
    }

    func launch(_ id: String) {
        guard var task = tasks[id] else { return }
        let run = nextRun
        nextRun += 1
        let limiter = TokenBucket(bytesPerSecond: task.rateLimit ?? TokenBucket.unlimitedRate)
        var (request, downloadConfiguration) = task.download(
            base: configuration.download, limiters: [globalLimiter, limiter])
        downloadConfiguration.progressInterval = min(
            downloadConfiguration.progressInterval, max(.milliseconds(50), configuration.progressEventInterval))
        let download = Download(request, configuration: downloadConfiguration, client: client)
        active[id] = ActiveTransfer(run: run, download: download, limiter: limiter)
        announcements.taskStarted()
        task.state = .running
        task.error = nil
        store(task)
        emit(.stateChanged(taskID: id, state: .running))
        let prior = stopping[id]?.task
        Task { [weak self] in
            // A previous transfer of this task must be fully stopped before a new one opens its files.
            if let prior { await prior.value }
            guard let self, await self.begin(id, run: run) else { return }
            for await event in download.events {
                switch event {
                case .progress(let progress):
                    await self.transferProgress(id, run: run, progress)
                case .stateChanged(_, .urlRefreshed(let url)):
                    await self.transferURLChanged(id, run: run, url)
                default:
                    break
                }
            }
            let outcome: Result<DownloadResult, DownloadError>
            do throws(DownloadError) {
                outcome = .success(try await download.result())
            } catch {
                outcome = .failure(error)
            }
            await self.transferEnded(id, run: run, outcome, progress: download.progress)
        }
    }

    /// Starts the transfer if it is still wanted (called on the manager, so it cannot race a pause).
    func begin(_ id: String, run: Int) -> Bool {
        guard let transfer = active[id], transfer.run == run else { return false }
        transfer.download.start()
        return true
    }

    /// Stops a running transfer (keeping its bytes), then deletes `paths`; later transfers of the task wait
    /// for this.
    func stopTransfer(_ id: String, deleting paths: [String] = []) {
        let transfer = active.removeValue(forKey: id)
        guard transfer != nil || !paths.isEmpty else { return }
        let prior = stopping[id]?.task
        let token = nextRun
        nextRun += 1
        let stop = Task { [weak self] in
            if let prior { await prior.value }
            if let download = transfer?.download {
                _ = await download.pause()
                let outcome: Result<DownloadResult, DownloadError>
                do throws(DownloadError) {
                    outcome = .success(try await download.result())
                } catch {
                    outcome = .failure(error)
                }
                await self?.transferStopped(id, outcome, progress: download.progress)
            }
            // Only what this user owns: a name another user planted beside the destination stays (issue #44).
            for path in paths { try? FileSystem.removeIfOwned(path) }
            await self?.stopFinished(id, token: token)
        }
        stopping[id] = (token, stop)
    }

    func stopFinished(_ id: String, token: Int) {
        if stopping[id]?.token == token { stopping[id] = nil }
    }

    /// A transfer we stopped has ended: record its bytes, or its completion if it finished meanwhile.
    func transferStopped(_ id: String, _ outcome: Result<DownloadResult, DownloadError>, progress: DownloadProgress) async {
        guard var task = tasks[id], active[id] == nil else { return }
        switch outcome {
        case .success(let result) where task.state != .cancelled:
            task.markCompleted(result)
            store(task)
            await announceCompletion(task, result, after: scheduler.withdraw(id))
        default:
            if task.state != .cancelled {
                task.bytesReceived = max(task.bytesReceived, progress.bytesReceived)
                if let total = progress.totalBytes { task.totalBytes = total }
                store(task)
            }
        }
        commitInBackground()
    }

    func transferProgress(_ id: String, run: Int, _ progress: DownloadProgress) {
        guard active[id]?.run == run, var task = tasks[id] else { return }
        task.bytesReceived = progress.bytesReceived
        if let total = progress.totalBytes { task.totalBytes = total }
        tasks.update(task)
        if pendingWrites.progressChanged(id) == .wake { flusherWake.yield() }
        if progressEvents.isDue(id, now: monotonicSeconds()) { emit(.progress(taskID: id, progress)) }
    }

    func transferURLChanged(_ id: String, run: Int, _ url: String) {
        guard active[id]?.run == run, var task = tasks[id] else { return }
        task.currentURL = url
        store(task)
        commitInBackground()
    }

    func transferEnded(
        _ id: String, run: Int, _ outcome: Result<DownloadResult, DownloadError>, progress: DownloadProgress
    ) async {
        guard active[id]?.run == run, var task = tasks[id] else { return }
        active[id] = nil
        progressEvents.forget(id)
        switch outcome {
        case .success(let result):
            task.markCompleted(result)
            store(task)
            await announceCompletion(task, result, after: scheduler.taskEnded(id))
        case .failure(let error):
            task.bytesReceived = progress.bytesReceived
            if let total = progress.totalBytes { task.totalBytes = total }
            task.state = .failed
            task.error = ManagedTaskError(error)
            task.finishedAt = Date()
            store(task)
            emit(.stateChanged(taskID: id, state: .failed))
            emit(.failed(taskID: id, error))
            notifyCompletion(TaskCompletion(task: task, result: .failure(error)))
            apply(scheduler.taskEnded(id))
        }
        commitInBackground()
    }

    /// Tells everyone that `task` (already stored as completed) completed.
    ///
    /// The row says "completed" before anyone is told: a death after this never re-runs a completion
    /// hook; a death before it (after the engine's rename) is recovered by `restore()`, which runs the hook
    /// then — once either way (issue #13, defect 10). Other calls may run on this actor while the row is
    /// committed; if one enqueued the task again meanwhile, `.stateChanged(.completed)` is left out (the
    /// task's last announced state stays the newer one), while `.finished` and the completion handler
    /// still report this run's file.
    ///
    /// `actions` are the scheduler's answer to the task's end, applied first: the task and the scheduler
    /// agree that it ended before the commit suspends this actor, so a call that runs meanwhile (the task
    /// enqueued again because its file was deleted) finds it ended and schedules it anew. `.allFinished`
    /// is held back until after `.finished` — this task's and that of every other completion still being
    /// committed (two tasks ending together: the last one's commit may return first) — and emitted only if
    /// still true then.
    func announceCompletion(_ task: ManagedTask, _ result: DownloadResult, after actions: [Scheduler.Action]) async {
        apply(actions.filter { $0 != .allFinished })
        announcements.announcing(schedulerSaidAllFinished: actions.contains(.allFinished))
        await commitLogging()
        let announced = announcements.announced(schedulerIsIdle: scheduler.isIdle)
        if tasks[task.id]?.state == .completed { emit(.stateChanged(taskID: task.id, state: .completed)) }
        emit(.finished(taskID: task.id, path: result.path))
        notifyCompletion(TaskCompletion(task: task, result: .success(result)))
        if announced.emitsAllFinished { emit(.allFinished) }
        for waiter in announced.drained { waiter.resume() }
    }

    func notifyCompletion(_ completion: TaskCompletion) {
        for handler in announcements.handlers(forTask: completion.task.id) { handler(completion) }
    }

    func networkChanged(_ status: NetworkStatus) {
        guard !isClosed, status != scheduler.network else { return }
        emit(.networkChanged(status))
        apply(scheduler.setNetwork(status))
        commitInBackground()
    }
}
