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
        /// This task's connections to one source (1…64); nil for the configuration's
        /// `download.connectionsPerSource`.
        public var connectionsPerSource: Int?
        /// Other URLs of the same resource, tried beside ``url`` (``DownloadRequest/mirrors``). Default none.
        public var mirrors: [String] = []
        /// The file's piece hashes (``ManagedTask/pieceChecksums``): each piece verified as it completes, a
        /// bad one fetched again from another source. Checked against the file's length when the transfer
        /// starts (a table that does not fit fails the task with `invalidPieceChecksums`). Default none.
        public var pieceChecksums: PieceChecksums?
        /// Whether an existing task of the same URL (or file id) is reused only while it is waiting,
        /// running or paused: a completed, failed or cancelled one is then left as it is (listed with
        /// its result) and a new task is made, as aria2's `addUri` makes a new download. Default false:
        /// any existing task is reused.
        public var reusesLiveTaskOnly = false
        /// Whether a new task is made paused — never started until resumed — rather than waiting (aria2's
        /// `pause` option). Enqueuing and then pausing is not the same: the scheduler may start the transfer in
        /// between, and the paused task then holds bytes (and a partial file) nobody asked for. An existing
        /// task that is reused is left in its state. Default false.
        public var startsPaused = false

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
    struct ActiveTransfer {
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

    let store: any TaskStoring
    let broadcaster = EventBroadcaster(bufferSize: 4096)
    var logger: Logger { configuration.logger }
    var scheduler: Scheduler
    var tasks = TaskTable()
    var active: [String: ActiveTransfer] = [:]
    var stopping: [String: (token: Int, task: Task<Void, Never>)] = [:]
    var nextRun = 1
    /// The rows owed to the store and the flusher's wake-ups (``PendingWrites``).
    var pendingWrites = PendingWrites()
    /// Wakes the flusher (one wake-up buffered): it sleeps while nothing is dirty instead of ticking.
    let flusherWake: AsyncStream<Void>.Continuation
    /// How many times the flusher wrote progress (tests: none while idle).
    var progressFlushes: Int { pendingWrites.flushes }
    /// When a task's progress is emitted (``ProgressEventThrottle``).
    var progressEvents: ProgressEventThrottle
    var eventHandler: (@Sendable (ManagerEvent) -> Void)?
    /// The completion handlers and when each completion and `.allFinished` is announced
    /// (``CompletionAnnouncements``).
    var announcements = CompletionAnnouncements<TaskCompletion, CheckedContinuation<Void, Never>>()
    var globalRateLimit: Int?
    var networkWatcher: Task<Void, Never>?
    var flusher: Task<Void, Never>?
    var isClosed = false

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
        let (flusherWakes, flusherWake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        self.flusherWake = flusherWake
        do {
            client = try DKHTTPClient(configuration: configuration.download.client, logger: configuration.logger)
        } catch {
            throw DownloadManagerError(.storage, "cannot open the manager in \(stateDirectory): \(error)")
        }
        globalRateLimit = configuration.globalRateLimit
        progressEvents = ProgressEventThrottle(interval: configuration.progressEventInterval.asSeconds)
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
        // Woken by the first dirty task, then writes after one interval: progress is written at most once
        // per interval and at most an interval late, and an idle manager never wakes (no timed poll).
        let interval = max(0.05, configuration.progressPersistInterval.asSeconds)
        flusher = Task { [weak self] in
            for await _ in flusherWakes {
                try? await Task.sleep(nanoseconds: UInt64(interval * 1e9))
                guard let self, !Task.isCancelled else { return }
                await self.flushProgress()
            }
        }
    }

    deinit {
        networkWatcher?.cancel()
        flusher?.cancel()
        flusherWake.finish()
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
        // Completions found at start (a file renamed into place just before the previous process died,
        // its row not yet updated) go to the first handler: they never reached one.
        for completion in announcements.setHandler(handler) { handler?(completion) }
    }

    /// A closure called once when this task completes or fails (not persisted: set it again after a restart).
    public func setCompletionHandler(taskID: String, _ handler: (@Sendable (TaskCompletion) -> Void)?) throws {
        _ = try existing(taskID)
        announcements.setHandler(taskID: taskID, handler)
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
        tasks.members(ofGroup: group)
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
        let members = tasks.members(ofGroup: group)
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
