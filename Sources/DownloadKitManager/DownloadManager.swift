@_spi(DownloadKitInternal) import DownloadKit
import Foundation
import HTTPClient
import HTTPWire
import Logging

/// A persistent, prioritised download queue bound to a state directory (the Linux counterpart of
/// YCDownloadManager / HWDownloadDemo's manager).
///
/// Tasks live in `<stateDirectory>/tasks.sqlite` (SQLite through GRDB, WAL). A task's bytes live in its
/// destination's `.dkpart`/`.dkresume` files, so after a crash or kill -9 a new manager on the same
/// directory finds every unfinished task and its transfer continues from the durable bytes. The
/// scheduling rules are the pure ``Scheduler``; this actor carries out its actions. All transfers share
/// one `DKHTTPClient` (connection reuse, `maxConnectionsPerOrigin`) and one global ``TokenBucket``.
///
/// ```swift
/// let manager = try await DownloadManager(stateDirectory: "/var/lib/app/downloads")
/// let id = try await manager.enqueue(url: "https://example.com/a.iso", destination: .file("/data/a.iso"))
/// for await event in manager.events {
///     if case .finished(let taskID, let path) = event, taskID == id { print("done:", path) }
/// }
/// ```
///
/// Nothing here is global: several managers on different directories can live in one process (a daemon).
public actor DownloadManager {
    /// What ``enqueue(_:)`` takes for each task (see ``enqueue(url:fileID:destination:priority:checksum:headers:group:metadata:requiresUnmeteredNetwork:rateLimit:)``).
    public struct TaskRequest: Sendable {
        public var url: String
        public var fileID: String?
        public var destination: DownloadDestination?
        public var priority: DownloadPriority
        public var checksum: Checksum?
        public var headers: [String: String]
        public var group: String?
        public var metadata: [String: String]
        public var requiresUnmeteredNetwork: Bool
        public var rateLimit: Int?
        /// This task's range connections (1…64); nil for the configuration's `download.connections`.
        public var connections: Int?
        /// Whether an existing task of the same URL (or file id) is reused only while it is waiting,
        /// running or paused: a completed, failed or cancelled one is then left as it is (listed with
        /// its result) and a new task is made, as aria2's `addUri` makes a new download. Default false:
        /// any existing task is reused.
        public var reusesLiveTaskOnly = false

        public init(
            url: String, fileID: String? = nil, destination: DownloadDestination? = nil,
            priority: DownloadPriority = .normal, checksum: Checksum? = nil, headers: [String: String] = [:],
            group: String? = nil, metadata: [String: String] = [:], requiresUnmeteredNetwork: Bool = false,
            rateLimit: Int? = nil, connections: Int? = nil
        ) {
            self.url = url
            self.fileID = fileID
            self.destination = destination
            self.priority = priority
            self.checksum = checksum
            self.headers = headers
            self.group = group
            self.metadata = metadata
            self.requiresUnmeteredNetwork = requiresUnmeteredNetwork
            self.rateLimit = rateLimit
            self.connections = connections
        }
    }

    /// The running transfer of a task.
    private struct ActiveTransfer {
        var run: Int
        var download: Download
        var limiter: TokenBucket
    }

    /// The state directory.
    public nonisolated let stateDirectory: String
    /// The settings the manager was created with (limits changed later are read from the manager).
    public nonisolated let configuration: DownloadManagerConfiguration
    /// The one HTTP client all transfers share.
    public nonisolated let client: DKHTTPClient
    /// The bucket every transfer draws from (the global limit).
    public nonisolated let globalLimiter: TokenBucket

    private let store: any TaskStoring
    private let broadcaster = EventBroadcaster(bufferSize: 4096)
    private var logger: Logger { configuration.logger }
    private var scheduler: Scheduler
    private var tasks: [String: ManagedTask] = [:]
    private var idByURL: [String: String] = [:]
    private var idByFileID: [String: String] = [:]
    private var groups: [String: Set<String>] = [:]
    private var active: [String: ActiveTransfer] = [:]
    private var stopping: [String: (token: Int, task: Task<Void, Never>)] = [:]
    private var nextRun = 1
    private var dirty: Set<String> = []
    private var deleted: Set<String> = []
    private var progressDirty: Set<String> = []
    private var lastProgressEvent: [String: Double] = [:]
    private var eventHandler: (@Sendable (ManagerEvent) -> Void)?
    private var completionHandler: (@Sendable (TaskCompletion) -> Void)?
    private var taskCompletionHandlers: [String: @Sendable (TaskCompletion) -> Void] = [:]
    /// Completions recovered by ``restore()``, held for the first completion handler.
    private var recoveredCompletions: [TaskCompletion] = []
    /// Completions whose row is being committed before `.finished` is emitted (the actor may run other
    /// work meanwhile, including another task's completion).
    private var completionsBeingAnnounced = 0
    /// ``close()`` waiting for the completions being announced: a task whose `result()` already returned
    /// (its row says completed) still gets its `.finished` and its completion handler before the event
    /// streams end.
    private var announcementsDrained: [CheckedContinuation<Void, Never>] = []
    /// The scheduler said "all finished" while a completion was still being announced: `.allFinished`
    /// waits for that `.finished` (``emitAllFinishedIfDue()``). Cleared when a task starts.
    private var allFinishedHeldBack = false
    private var globalRateLimit: Int?
    private var networkWatcher: Task<Void, Never>?
    private var flusher: Task<Void, Never>?
    private var isClosed = false

    /// Opens the manager on `stateDirectory` (created if missing) and restores its tasks.
    ///
    /// Tasks that were waiting or running when the previous manager stopped come back paused unless
    /// ``DownloadManagerConfiguration/startsRestoredTasks`` is set; then they rejoin the line in their old
    /// order and start as slots allow.
    /// - Parameters:
    ///   - networkMonitor: Network status source; none means the network is always allowed.
    /// - Throws: ``DownloadManagerError`` (`storage`) when the directory or database cannot be opened.
    public init(
        stateDirectory: String, configuration: DownloadManagerConfiguration = DownloadManagerConfiguration(),
        networkMonitor: (any NetworkMonitor)? = nil
    ) async throws {
        let store: TaskStore
        do {
            store = try TaskStore(directory: stateDirectory)
        } catch {
            throw DownloadManagerError(.storage, "cannot open the manager in \(stateDirectory): \(error)")
        }
        try await self.init(
            stateDirectory: stateDirectory, store: store, configuration: configuration, networkMonitor: networkMonitor)
    }

    /// Opens the manager on the tasks of `store` (``TaskStore`` in SQLite, or another ``TaskStoring``) and
    /// restores them as ``init(stateDirectory:configuration:networkMonitor:)`` does; `stateDirectory` is
    /// the default download directory's parent. The manager owns the store's tasks: one manager per store.
    /// - Throws: ``DownloadManagerError`` (`storage`) when the tasks cannot be read or the client made.
    public init(
        stateDirectory: String, store: any TaskStoring,
        configuration: DownloadManagerConfiguration = DownloadManagerConfiguration(),
        networkMonitor: (any NetworkMonitor)? = nil
    ) async throws {
        self.stateDirectory = stateDirectory
        self.configuration = configuration
        self.store = store
        do {
            client = try DKHTTPClient(configuration: configuration.download.client, logger: configuration.logger)
        } catch {
            throw DownloadManagerError(.storage, "cannot open the manager in \(stateDirectory): \(error)")
        }
        globalRateLimit = configuration.globalRateLimit
        globalLimiter = TokenBucket(bytesPerSecond: configuration.globalRateLimit ?? TokenBucket.unlimitedRate)
        scheduler = Scheduler(
            maxConcurrent: configuration.maxConcurrentDownloads,
            network: networkMonitor?.currentStatus ?? NetworkStatus(isReachable: true, isMetered: false),
            allowsMeteredNetwork: configuration.allowsMeteredNetwork)
        try await restore()
        if let networkMonitor {
            let updates = networkMonitor.statusUpdates()
            networkWatcher = Task { [weak self] in
                for await status in updates {
                    await self?.networkChanged(status)
                }
            }
        }
        let interval = max(0.05, configuration.progressPersistInterval.asSeconds)
        flusher = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(nanoseconds: UInt64(interval * 1e9))
                guard let self else { return }
                await self.flushProgress()
            }
        }
    }

    deinit {
        networkWatcher?.cancel()
        flusher?.cancel()
    }

    // MARK: - Events and hooks

    /// A new stream of every later event (each access makes a new subscriber; ends on ``close()``).
    public nonisolated var events: EventSequence<ManagerEvent> { broadcaster.subscribe() }

    /// A closure called with every event, on the manager (keep it quick); nil removes it.
    public func setEventHandler(_ handler: (@Sendable (ManagerEvent) -> Void)?) {
        eventHandler = handler
    }

    /// A closure called whenever a task completes or fails (seed 000's local notification hook).
    public func setCompletionHandler(_ handler: (@Sendable (TaskCompletion) -> Void)?) {
        completionHandler = handler
        // Completions found at start (a file renamed into place just before the previous process died,
        // its row not yet updated) go to the first handler: they never reached one.
        if let handler {
            let recovered = recoveredCompletions
            recoveredCompletions = []
            for completion in recovered { handler(completion) }
        }
    }

    /// A closure called once when this task completes or fails (not persisted: set it again after a restart).
    public func setCompletionHandler(taskID: String, _ handler: (@Sendable (TaskCompletion) -> Void)?) throws {
        _ = try existing(taskID)
        taskCompletionHandlers[taskID] = handler
    }

    // MARK: - Queries

    /// One task, or nil.
    public func task(_ id: String) -> ManagedTask? { tasks[id] }

    /// Every task, in waiting-line order of their places (completed ones included).
    public func allTasks() -> [ManagedTask] {
        tasks.values.sorted { ($0.queueOrder, $0.id) < ($1.queueOrder, $1.id) }
    }

    /// The tasks of a group.
    public func tasks(inGroup group: String) -> [ManagedTask] {
        (groups[group] ?? []).compactMap { tasks[$0] }.sorted { ($0.queueOrder, $0.id) < ($1.queueOrder, $1.id) }
    }

    /// The waiting line, first to start first.
    public func waitingTaskIDs() -> [String] { scheduler.waitingIDs }

    /// The running tasks.
    public func runningTaskIDs() -> Set<String> { scheduler.runningIDs }

    /// Whether nothing runs and nothing waits (paused, completed, failed and cancelled tasks do not count).
    /// O(1): a loop that asks after every completion stays linear in the number of tasks, where
    /// ``allTasks()`` (a sorted copy of every task) would make it quadratic.
    public var isIdle: Bool { scheduler.isIdle }

    /// The concurrency limit now.
    public var maxConcurrent: Int { scheduler.maxConcurrent }

    /// The network status the manager acts on.
    public var networkStatus: NetworkStatus { scheduler.network }

    /// Aggregate progress of a group.
    public func progress(ofGroup group: String) -> GroupProgress {
        let members = (groups[group] ?? []).compactMap { tasks[$0] }
        var states: [ManagedTaskState: Int] = [:]
        var received: Int64 = 0
        var total: Int64? = 0
        for task in members {
            states[task.state, default: 0] += 1
            received += task.bytesReceived
            if let known = task.totalBytes, let sum = total { total = sum + known } else { total = nil }
        }
        return GroupProgress(
            taskCount: members.count, completedCount: states[.completed] ?? 0, bytesReceived: received,
            totalBytes: members.isEmpty ? nil : total, states: states)
    }

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
    @discardableResult
    public func enqueue(_ requests: [TaskRequest]) async throws -> [String] {
        try ensureOpen()
        for request in requests { try validate(url: request.url) }
        var ids: [String] = []
        ids.reserveCapacity(requests.count)
        var actions: [Scheduler.Action] = []
        let now = Date()
        // Room for the batch up front: growing these tables one rehash at a time was an eighth of a
        // 10,000-task enqueue.
        tasks.reserveCapacity(tasks.count + requests.count)
        idByURL.reserveCapacity(idByURL.count + requests.count)
        dirty.reserveCapacity(dirty.count + requests.count)
        var identifiers = TaskIdentifier.Generator(expected: requests.count)
        for request in requests {
            if let existing = idByURL[request.url] ?? request.fileID.flatMap({ idByFileID[$0] }),
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
                createdAt: now, updatedAt: now, finishedAt: nil, connections: request.connections)
            let (order, newActions) = scheduler.resume(
                id, priority: request.priority.rawValue, requiresUnmeteredNetwork: request.requiresUnmeteredNetwork)
            task.queueOrder = order
            index(task)
            tasks[id] = task
            dirty.insert(id)
            ids.append(id)
            actions += newActions
            emit(.stateChanged(taskID: id, state: .waiting))
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
    private func settle(_ ids: [String]) async {
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
        var task = try existing(taskID)
        guard task.currentURL != newURL else { return }
        if idByURL[task.currentURL] == taskID, task.currentURL != task.originalURL { idByURL[task.currentURL] = nil }
        task.currentURL = newURL
        if idByURL[newURL] == nil { idByURL[newURL] = taskID }
        store(task)
        if active[taskID] != nil {
            stopTransfer(taskID)
            launch(taskID)
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
        dirty.formUnion(progressDirty)
        progressDirty = []
        await commitLogging()
        await store.drain()
        while completionsBeingAnnounced > 0 {
            await withCheckedContinuation { announcementsDrained.append($0) }
        }
        broadcaster.finish()
    }

    // MARK: - Internals: bulk operations

    private func pause(_ selected: [ManagedTask]) throws {
        for task in selected where task.state == .waiting || task.state == .running {
            let actions = scheduler.withdraw(task.id)
            stopTransfer(task.id)
            setState(task.id, .paused)
            apply(actions)
        }
    }

    /// A completed task enqueued again whose file was deleted is downloaded again (never reported as
    /// "already done" without its file). Returns the scheduler's actions.
    private func requeueIfFileGone(_ id: String) -> [Scheduler.Action] {
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

    private func resume(_ selected: [ManagedTask]) throws {
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

    private func cancel(_ selected: [ManagedTask]) throws {
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

    private func remove(_ selected: [ManagedTask], deletingFile: Bool) throws {
        for task in selected {
            var paths = ownedPartialPaths(task)
            if deletingFile, task.state == .completed, let path = task.path { paths.append(path) }
            let actions = scheduler.withdraw(task.id)
            stopTransfer(task.id, deleting: paths)
            unindex(task)
            tasks[task.id] = nil
            dirty.remove(task.id)
            progressDirty.remove(task.id)
            lastProgressEvent[task.id] = nil
            taskCompletionHandlers[task.id] = nil
            deleted.insert(task.id)
            emit(.removed(taskID: task.id))
            apply(actions)
        }
    }

    // MARK: - Internals: carrying out the scheduler's actions

    private func apply(_ actions: [Scheduler.Action]) {
        for action in actions {
            switch action {
            case .start(let id):
                launch(id)
            case .requeue(let id), .holdForNetwork(let id):
                stopTransfer(id)
                setState(id, .waiting)
            case .allFinished:
                allFinishedHeldBack = true
                emitAllFinishedIfDue()
            }
        }
    }

    private func launch(_ id: String) {
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
        allFinishedHeldBack = false
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
    private func begin(_ id: String, run: Int) -> Bool {
        guard let transfer = active[id], transfer.run == run else { return false }
        transfer.download.start()
        return true
    }

    /// Stops a running transfer (keeping its bytes), then deletes `paths`; later transfers of the task wait
    /// for this.
    private func stopTransfer(_ id: String, deleting paths: [String] = []) {
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

    private func stopFinished(_ id: String, token: Int) {
        if stopping[id]?.token == token { stopping[id] = nil }
    }

    /// A transfer we stopped has ended: record its bytes, or its completion if it finished meanwhile.
    private func transferStopped(_ id: String, _ outcome: Result<DownloadResult, DownloadError>, progress: DownloadProgress) async {
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

    private func transferProgress(_ id: String, run: Int, _ progress: DownloadProgress) {
        guard active[id]?.run == run, var task = tasks[id] else { return }
        task.bytesReceived = progress.bytesReceived
        if let total = progress.totalBytes { task.totalBytes = total }
        tasks[id] = task
        progressDirty.insert(id)
        let now = monotonicSeconds()
        if now - (lastProgressEvent[id] ?? 0) >= configuration.progressEventInterval.asSeconds {
            lastProgressEvent[id] = now
            emit(.progress(taskID: id, progress))
        }
    }

    private func transferURLChanged(_ id: String, run: Int, _ url: String) {
        guard active[id]?.run == run, var task = tasks[id] else { return }
        task.currentURL = url
        if idByURL[url] == nil { idByURL[url] = id }
        store(task)
        commitInBackground()
    }

    private func transferEnded(
        _ id: String, run: Int, _ outcome: Result<DownloadResult, DownloadError>, progress: DownloadProgress
    ) async {
        guard active[id]?.run == run, var task = tasks[id] else { return }
        active[id] = nil
        lastProgressEvent[id] = nil
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
    private func announceCompletion(_ task: ManagedTask, _ result: DownloadResult, after actions: [Scheduler.Action]) async {
        apply(actions.filter { $0 != .allFinished })
        if actions.contains(.allFinished) { allFinishedHeldBack = true }
        completionsBeingAnnounced += 1
        await commitLogging()
        completionsBeingAnnounced -= 1
        if tasks[task.id]?.state == .completed { emit(.stateChanged(taskID: task.id, state: .completed)) }
        emit(.finished(taskID: task.id, path: result.path))
        notifyCompletion(TaskCompletion(task: task, result: .success(result)))
        emitAllFinishedIfDue()
        if completionsBeingAnnounced == 0 {
            let waiting = announcementsDrained
            announcementsDrained = []
            for waiter in waiting { waiter.resume() }
        }
    }

    /// Emits `.allFinished` when the scheduler said so, it is still idle, and no completion is still
    /// waiting to announce its `.finished`.
    private func emitAllFinishedIfDue() {
        guard allFinishedHeldBack, completionsBeingAnnounced == 0, scheduler.isIdle else { return }
        allFinishedHeldBack = false
        emit(.allFinished)
    }

    private func notifyCompletion(_ completion: TaskCompletion) {
        completionHandler?(completion)
        taskCompletionHandlers.removeValue(forKey: completion.task.id)?(completion)
    }

    private func networkChanged(_ status: NetworkStatus) {
        guard !isClosed, status != scheduler.network else { return }
        emit(.networkChanged(status))
        apply(scheduler.setNetwork(status))
        commitInBackground()
    }

    // MARK: - Internals: bookkeeping

    private func restore() async throws {
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
                    recoveredCompletions.append(TaskCompletion(task: task, result: .success(finished)))
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
                if task != stored { dirty.insert(task.id) }
            }
            tasks[task.id] = task
            index(task)
        }
        logger.debug("restored \(tasks.count) tasks from \(stateDirectory)")
        try await commit()
        apply(scheduler.schedule())
        try await commit()
    }

    private func index(_ task: ManagedTask) {
        // The newest task of a URL is the one found by it, in whatever order tasks are restored (there
        // are several only after ``TaskRequest/reusesLiveTaskOnly`` made a new one beside a stopped one).
        if let current = idByURL[task.originalURL], current != task.id, let other = tasks[current],
            (other.createdAt, other.id) > (task.createdAt, task.id)
        {
            // Keep the newer one.
        } else {
            idByURL[task.originalURL] = task.id
        }
        if idByURL[task.currentURL] == nil { idByURL[task.currentURL] = task.id }
        if let fileID = task.fileID { idByFileID[fileID] = task.id }
        if let group = task.group { groups[group, default: []].insert(task.id) }
    }

    private func unindex(_ task: ManagedTask) {
        for url in [task.originalURL, task.currentURL] where idByURL[url] == task.id { idByURL[url] = nil }
        if let fileID = task.fileID, idByFileID[fileID] == task.id { idByFileID[fileID] = nil }
        if let group = task.group {
            groups[group]?.remove(task.id)
            if groups[group]?.isEmpty == true { groups[group] = nil }
        }
    }

    private func existing(_ id: String) throws -> ManagedTask {
        guard let task = tasks[id] else { throw DownloadManagerError(.unknownTask, "no task \(id)") }
        return task
    }

    private func ensureOpen() throws {
        if isClosed { throw DownloadManagerError(.closed, "the manager is closed") }
    }

    private func validate(url: String) throws {
        do {
            let parsed = try HTTPURL(url)
            _ = parsed
        } catch {
            throw DownloadManagerError(.invalidURL, "not an http(s) URL: \(HTTPURL.redacting(url)) (\(error.detail))")
        }
    }

    private func store(_ task: ManagedTask) {
        var task = task
        task.updatedAt = Date()
        tasks[task.id] = task
        dirty.insert(task.id)
        progressDirty.remove(task.id)
    }

    private func setState(_ id: String, _ state: ManagedTaskState) {
        guard var task = tasks[id], task.state != state else { return }
        task.state = state
        store(task)
        emit(.stateChanged(taskID: id, state: state))
    }

    private func emit(_ event: ManagerEvent) {
        broadcaster.yield(event)
        eventHandler?(event)
    }

    /// Takes every changed row and deletion for one transaction (they are no longer dirty).
    private func takeChanges() -> (ids: Set<String>, records: [ManagedTask], deletions: Set<String>)? {
        guard !dirty.isEmpty || !deleted.isEmpty else { return nil }
        let changes = (ids: dirty, records: dirty.compactMap { tasks[$0] }, deletions: deleted)
        dirty = []
        deleted = []
        return changes
    }

    /// A transaction that failed: its rows are dirty again, for the next commit.
    private func unwritten(_ ids: Set<String>, _ deletions: Set<String>) {
        dirty.formUnion(ids.filter { tasks[$0] != nil })
        deleted.formUnion(deletions)
    }

    /// Writes every changed row and deletion in one transaction on the store's thread and waits for it
    /// (the API's changes: the caller learns of a storage failure).
    private func commit() async throws {
        guard let changes = takeChanges() else { return }
        do {
            try await store.save(changes.records, deleting: Array(changes.deletions))
        } catch {
            unwritten(changes.ids, changes.deletions)
            throw DownloadManagerError(.storage, "cannot write the tasks: \(error)")
        }
    }

    /// Like ``commit()`` but logs a failure instead of throwing it.
    private func commitLogging() async {
        do {
            try await commit()
        } catch {
            logger.error("\(error)")
        }
    }

    /// Hands every change to the store's thread without waiting (progress, transfer bookkeeping); writes
    /// keep their order, and a failed one leaves its rows dirty for the next commit.
    private func commitInBackground() {
        guard let changes = takeChanges() else { return }
        let logger = logger
        store.saveInBackground(changes.records, deleting: Array(changes.deletions)) { [weak self] error in
            logger.error("cannot write the tasks: \(error)")
            Task { await self?.unwritten(changes.ids, changes.deletions) }
        }
    }

    /// Writes bytes received by running tasks (at most every `progressPersistInterval`).
    private func flushProgress() {
        dirty.formUnion(progressDirty)
        progressDirty = []
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
    private func ownedPartialPaths(_ task: ManagedTask) -> [String] {
        let paths = partialPaths(task)
        guard idByURL[task.originalURL] != task.id else { return paths }
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

    private static func fileSize(_ path: String) -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_size)
    }
}

extension ManagedTask {
    /// The one place a task becomes completed with its download's result.
    mutating func markCompleted(_ result: DownloadResult) {
        state = .completed
        path = result.path
        bytesReceived = result.bytes
        totalBytes = result.bytes
        error = nil
        finishedAt = Date()
    }
}
