@_spi(DownloadKitInternal) import DownloadKit
@_spi(DownloadKitInternal) import DownloadKitManager
import Foundation
import HTTPClient
import HTTPWire
import Logging

/// One worker of a fleet: downloads the tasks it claims from a shared ``PostgresTaskStore`` under leases
/// (docs/FLEET.md).
///
/// It claims waiting tasks (the fleet's priority and queue order, at most ``Configuration/maxConcurrent``
/// at a time, and no more than the fleet-wide limit allows), renews its leases by heartbeat, and
/// records each task's end fenced by the lease's epoch. Each download's working files are guarded by a
/// ``WriteFence`` whose deadline the heartbeat moves forward: a worker that cannot renew (paused past its
/// lease, cut off from the database) stops writing when its lease would run out, and one whose lease
/// another worker took stops at once, leaving the bytes it wrote durably to the next holder, who
/// continues from them (the engine resumes from a partial and its resume info). The engine's advisory
/// lock on the partial keeps a second writer out while the first still has it open.
///
/// ```swift
/// let store = try await PostgresTaskStore.open(PostgresStoreURL("postgres://dk@db.example/downloads")!)
/// let worker = try FleetWorker(store: store, configuration: .init(workerID: "host-a"))
/// let summary = try await worker.run()        // until nothing waits or runs in the whole queue
/// ```
public actor FleetWorker {
    /// A worker's settings.
    public struct Configuration: Sendable {
        /// This worker's id in the fleet (unique among live workers: a host name plus a process id, say).
        public var workerID: String
        /// At most this many tasks at a time on this worker.
        public var maxConcurrent: Int
        /// How long a lease lasts without renewal: a dead worker's tasks wait this long for another.
        public var lease: Duration
        /// How often leases are renewed (default: a third of the lease).
        public var heartbeat: Duration?
        /// How often the worker looks for work while it cannot listen to the store's task changes (its
        /// LISTEN connection is lost); while it listens, it looks when a change is announced.
        public var pollInterval: Duration
        /// How long to wait before trying a task again whose partial another writer still holds open.
        public var busyRetryDelay: Duration
        /// Settings of every download.
        public var download: DownloadConfiguration
        /// A limit for all of this worker's transfers together, in bytes per second.
        public var globalRateLimit: Int?
        /// Send `X-DownloadKit-Worker: <id>` with every request (diagnostics: which worker fetched what).
        public var identifiesInRequests: Bool
        /// End ``FleetWorker/run()`` once no task waits or runs anywhere in the queue (else run until
        /// ``FleetWorker/stop()``).
        public var stopsWhenQueueIsEmpty: Bool
        /// Called with each claimed task just before its download starts (a program binds credentials
        /// to the task's origin here, for instance).
        public var willStart: (@Sendable (ManagedTask) -> Void)?
        /// Where the worker logs claims, endings, lost leases and database errors.
        public var logger: Logger

        /// A worker's settings; `workerID` must be unique among the fleet's live workers.
        public init(
            workerID: String, maxConcurrent: Int = 3, lease: Duration = .seconds(30), heartbeat: Duration? = nil,
            pollInterval: Duration = .seconds(1), busyRetryDelay: Duration = .seconds(1),
            download: DownloadConfiguration = DownloadConfiguration(), globalRateLimit: Int? = nil,
            identifiesInRequests: Bool = false, stopsWhenQueueIsEmpty: Bool = true,
            logger: Logger = Logger(label: "downloadkit.fleet")
        ) {
            self.workerID = workerID
            self.maxConcurrent = maxConcurrent
            self.lease = lease
            self.heartbeat = heartbeat
            self.pollInterval = pollInterval
            self.busyRetryDelay = busyRetryDelay
            self.download = download
            self.globalRateLimit = globalRateLimit
            self.identifiesInRequests = identifiesInRequests
            self.stopsWhenQueueIsEmpty = stopsWhenQueueIsEmpty
            self.willStart = nil
            self.logger = logger
        }
    }

    /// What happened to the tasks this worker held.
    public enum Event: Sendable {
        /// Claimed, with this many bytes already in its partial (another worker's, or an earlier run's).
        case claimed(Lease, bytesOnDisk: Int64)
        /// A transfer's progress (every `progressInterval` of the download configuration).
        case progress(Lease, DownloadProgress)
        /// The file is in place and the completion is recorded.
        case completed(Lease, DownloadResult)
        /// The download failed for good; recorded as failed.
        case failed(Lease, DownloadError)
        /// Another worker holds the task now (or it was changed): this worker stopped writing it;
        /// `refusedWrites` writes were refused by its fence.
        case lost(Lease, refusedWrites: Int)
        /// Given back to the queue when the worker stopped.
        case released(Lease)
        /// The partial is still open in another writer (a previous holder that has not noticed yet):
        /// trying again after ``Configuration/busyRetryDelay``.
        case waitingForWriter(Lease)
    }

    /// What a run did.
    public struct Summary: Sendable {
        /// Tasks this worker completed.
        public var completed: [String] = []
        /// Tasks that failed on this worker, with their errors.
        public var failed: [(taskID: String, error: DownloadError)] = []
        /// Tasks whose lease this worker lost (another worker holds them, or they were paused).
        public var lost: [String] = []
        /// Tasks given back to the queue when the worker stopped.
        public var released: [String] = []
    }

    private struct Running {
        var lease: Lease
        var fence: WriteFence
        var download: Download?
        var generation: Int
        var bytes: Int64
        var totalBytes: Int64?
    }

    /// The fleet's queue.
    public nonisolated let store: PostgresTaskStore
    /// The worker's settings.
    public nonisolated let configuration: Configuration
    private let client: DKHTTPClient
    private let globalLimiter: TokenBucket
    private var running: [String: Running] = [:]
    private var nextGeneration = 1
    /// Leases whose end is being recorded (they still take a slot).
    private var finishing = 0
    private var stopping = false
    private var summary = Summary()
    private var eventHandler: (@Sendable (Event) -> Void)?
    private var logger: Logger { configuration.logger }
    /// Wakes ``run()``'s claim loop (set while it runs).
    private var wake: AsyncStream<Void>.Continuation?
    /// How many times ``run()`` looked for work (tests: once per cause, never on a timer while listening).
    var claimRounds = 0

    /// A worker on `store`; nothing runs until ``run()``.
    /// - Throws: when the HTTP client cannot be made from `configuration.download.client` (TLS settings).
    public init(store: PostgresTaskStore, configuration: Configuration) throws {
        self.store = store
        self.configuration = configuration
        client = try DKHTTPClient(configuration: configuration.download.client, logger: configuration.logger)
        globalLimiter = TokenBucket(bytesPerSecond: configuration.globalRateLimit ?? TokenBucket.unlimitedRate)
    }

    /// A closure called with every event, on the worker (keep it quick).
    public func setEventHandler(_ handler: (@Sendable (Event) -> Void)?) {
        eventHandler = handler
    }

    private var leaseSeconds: Double { configuration.lease / .seconds(1) }

    /// The local deadline of a lease granted or renewed by a request sent at `sent` (monotonic): a tenth
    /// short of the lease, so it passes before the server's deadline does.
    private func deadline(sentAt sent: Double) -> Double { sent + leaseSeconds * 0.9 }

    /// Works until the queue is empty (``Configuration/stopsWhenQueueIsEmpty``) or ``stop()``; returns what
    /// this worker did. Database errors are logged and retried; the leases run out meanwhile.
    ///
    /// It looks for work when something may have changed, not on a timer: the store announces every task
    /// change on the `downloadkit_task` channel (LISTEN/NOTIFY: a task added, resumed, finished or given back
    /// by any worker), a slot of this worker frees up, ``stop()`` is called, or the heartbeat runs (a dead
    /// worker's lease runs out without any NOTIFY; the heartbeat, every third of a lease by default, is when
    /// this worker looks for such tasks). Only while the listening connection is lost does it look every
    /// ``Configuration/pollInterval`` until it listens again.
    public func run() async throws -> Summary {
        try await store.register(worker: configuration.workerID, maxConcurrent: configuration.maxConcurrent)
        let (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        self.wake = wake
        let heartbeat = Task { [weak self] in await self?.heartbeatLoop() }
        let listener = Task { [store, configuration] in
            await Self.listen(to: store, waking: wake, fallback: configuration.pollInterval, logger: configuration.logger)
        }
        defer {
            heartbeat.cancel()
            listener.cancel()
            wake.finish()
        }
        wake.yield()
        for await _ in wakes {
            if stopping { break }
            claimRounds += 1
            let free = configuration.maxConcurrent - running.count - finishing
            if free > 0 {
                let sent = WriteFence.now
                do {
                    let leases = try await store.claim(
                        worker: configuration.workerID, count: free, lease: configuration.lease)
                    for lease in leases { launch(lease, deadline: deadline(sentAt: sent)) }
                } catch {
                    logger.error("claiming tasks failed: \(String(reflecting: error))")
                }
            }
            if configuration.stopsWhenQueueIsEmpty, running.isEmpty, finishing == 0, !stopping {
                if let pending = try? await store.pendingCount(), pending == 0, running.isEmpty, finishing == 0 { break }
            }
        }
        self.wake = nil
        await releaseAll()
        return summary
    }

    /// Wakes the claim loop of ``run()`` once (wake-ups coalesce while it is busy).
    private func wakeClaimLoop() {
        wake?.yield()
    }

    /// Listens to the store's task changes and wakes the claim loop on each; when the listening connection
    /// is lost (or cannot be made), wakes it every `fallback` while trying to listen again.
    private static func listen(
        to store: PostgresTaskStore, waking wake: AsyncStream<Void>.Continuation, fallback: Duration, logger: Logger
    ) async {
        while !Task.isCancelled {
            do {
                for try await _ in store.taskEvents() { wake.yield() }
            } catch {
                logger.warning(
                    "listening for task changes failed (looking for work every \(fallback) until it is back): \(String(reflecting: error))")
            }
            if Task.isCancelled { return }
            try? await Task.sleep(for: fallback)
            wake.yield()
        }
    }

    /// Stops claiming, stops every transfer with its bytes checkpointed and gives its task back to the
    /// queue (another worker may take it at once). ``run()`` then returns.
    public func stop() async {
        stopping = true
        wakeClaimLoop()
        await releaseAll()
    }

    // MARK: - Transfers

    private func launch(_ lease: Lease, deadline: Double) {
        let task = lease.task
        let store = self.store
        let workerID = configuration.workerID
        if let refusal = lease.refusal {
            // The stored code (`invalidDestination`, `invalidChecksum`) is the one the SQLite store restores.
            Task { await self.failedToStart(lease, refusal.downloadError) }
            return
        }
        let fence = WriteFence(until: deadline) { _ in
            // Asked on the engine's thread before each checkpoint and the final rename: the database must
            // still name this worker the holder of this epoch (and its partial is never spliced past it).
            Self.blockingAnswer(seconds: 10) { try await store.holds(lease, worker: workerID) }
        }
        do {
            _ = try HTTPURL(task.originalURL)
        } catch {
            let failure = DownloadError(.invalidURL, "not an http(s) URL: \(HTTPURL.redacting(task.originalURL))")
            Task { await self.failedToStart(lease, failure) }
            return
        }
        running[task.id] = Running(lease: lease, fence: fence, download: nil, generation: 0, bytes: 0, totalBytes: nil)
        let onDisk = Self.partialSize(task)
        logger.info("claimed \(task.id) (epoch \(lease.epoch)) with \(onDisk) bytes on disk")
        emit(.claimed(lease, bytesOnDisk: onDisk))
        start(task.id)
    }

    private func start(_ id: String) {
        guard var entry = running[id], !stopping else { return }
        let task = entry.lease.task
        let generation = nextGeneration
        nextGeneration += 1
        var (request, download) = task.download(
            base: configuration.download,
            limiters: [globalLimiter, TokenBucket(bytesPerSecond: task.rateLimit ?? TokenBucket.unlimitedRate)],
            extraHeaders: configuration.identifiesInRequests ? [("X-DownloadKit-Worker", configuration.workerID)] : [])
        // The lease's fence guards every write of this download (its own value, handed to the engine).
        download.fileIO.fence = entry.fence
        configuration.willStart?(task)
        let transfer = Download(request, configuration: download, client: client)
        entry.download = transfer
        entry.generation = generation
        running[id] = entry
        let lease = entry.lease
        let fence = entry.fence
        transfer.start()
        Task { [weak self] in
            for await event in transfer.events {
                if case .progress(let progress) = event { await self?.progressed(id, generation: generation, progress) }
            }
            let outcome: Result<DownloadResult, DownloadError>
            do throws(DownloadError) {
                outcome = .success(try await transfer.result())
            } catch {
                outcome = .failure(error)
            }
            await self?.ended(lease, generation: generation, outcome, fence: fence)
        }
    }

    private func failedToStart(_ lease: Lease, _ error: DownloadError) async {
        let recorded = (try? await record(lease, as: .failed(error, bytes: 0))) ?? false
        guard recorded else { return }
        summary.failed.append((lease.task.id, error))
        logger.error("\(lease.task.id) failed: \(error.detail)")
        emit(.failed(lease, error))
    }

    /// Records how a lease ended; the lease keeps its slot until the database has it, so a claim never
    /// runs ahead of it (the per-worker limit holds in the database's view too).
    private func record(_ lease: Lease, as ending: LeaseEnding) async throws -> Bool {
        finishing += 1
        defer {
            finishing -= 1
            wakeClaimLoop()  // its slot is free now
        }
        return try await store.finish(lease, worker: configuration.workerID, as: ending)
    }

    private func progressed(_ id: String, generation: Int, _ progress: DownloadProgress) {
        guard var entry = running[id], entry.generation == generation else { return }
        entry.bytes = progress.bytesReceived
        if let total = progress.totalBytes { entry.totalBytes = total }
        running[id] = entry
        emit(.progress(entry.lease, progress))
    }

    private func ended(
        _ lease: Lease, generation: Int, _ outcome: Result<DownloadResult, DownloadError>, fence: WriteFence
    ) async {
        let id = lease.task.id
        guard let entry = running[id], entry.generation == generation, entry.lease.epoch == lease.epoch else {
            // Lost or released meanwhile: whoever took it out of `running` reported it (the fence, the
            // transfer's own, ended with it).
            return
        }
        switch outcome {
        case .success(let result):
            running[id] = nil
            let recorded = (try? await record(lease, as: .completed(result))) ?? false
            if recorded {
                summary.completed.append(id)
                logger.info("completed \(id) (epoch \(lease.epoch)), resumed from byte \(result.resumedFrom)")
                emit(.completed(lease, result))
            } else {
                summary.lost.append(id)
                logger.warning("completed \(id) but its lease (epoch \(lease.epoch)) was lost before it was recorded")
                emit(.lost(lease, refusedWrites: fence.refusedWrites))
            }
        case .failure(let error):
            if stopping { return }  // releaseAll() gives it back
            if error.code == .destinationInUse {
                logger.notice("\(id): its partial is still open in another writer; trying again")
                emit(.waitingForWriter(lease))
                try? await Task.sleep(for: configuration.busyRetryDelay)
                if running[id]?.generation == generation { start(id) }
                return
            }
            if fence.refusedWrites > 0 || !fence.allowsWrites {
                // The lease ran out locally (a late heartbeat, a pause): renew it if nobody else took it.
                let sent = WriteFence.now
                let renewed = (try? await store.renew(
                    worker: configuration.workerID, leases: [(id, lease.epoch, entry.bytes)], lease: configuration.lease))
                guard running[id]?.generation == generation else { return }
                if renewed?.contains(id) == true {
                    fence.extend(until: deadline(sentAt: sent))
                    if fence.allowsWrites {
                        logger.notice("\(id): lease renewed late (epoch \(lease.epoch)); continuing from its bytes")
                        start(id)
                        return
                    }
                }
                lost(id)
                return
            }
            running[id] = nil
            let recorded = (try? await record(
                lease, as: .failed(error, bytes: entry.bytes))) ?? false
            if recorded {
                summary.failed.append((id, error))
                logger.error("\(id) failed: \(error.detail)")
                emit(.failed(lease, error))
            } else {
                summary.lost.append(id)
                emit(.lost(lease, refusedWrites: fence.refusedWrites))
            }
        }
    }

    /// The lease on `id` is gone: refuse every further write at once, stop the transfer, forget the task.
    private func lost(_ id: String) {
        guard let entry = running.removeValue(forKey: id) else { return }
        wakeClaimLoop()
        entry.fence.revoke()
        summary.lost.append(id)
        logger.warning(
            "lost the lease on \(id) (epoch \(entry.lease.epoch)): stopped writing it (\(entry.fence.refusedWrites) writes refused)")
        emit(.lost(entry.lease, refusedWrites: entry.fence.refusedWrites))
        if let download = entry.download {
            Task {
                _ = await download.pause()
                _ = try? await download.result()
            }
        }
    }

    // MARK: - Heartbeat

    private func heartbeatLoop() async {
        let interval = configuration.heartbeat ?? configuration.lease / 3
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            await heartbeat()
            // Leases of dead workers run out without a NOTIFY: look for them now.
            wakeClaimLoop()
        }
    }

    private func heartbeat() async {
        let held = running.values.map { (id: $0.lease.task.id, epoch: $0.lease.epoch, bytes: $0.bytes) }
        guard !held.isEmpty else { return }
        let sent = WriteFence.now
        let renewed: Set<String>
        do {
            renewed = try await store.renew(worker: configuration.workerID, leases: held, lease: configuration.lease)
        } catch {
            logger.error("renewing leases failed (they run out unless a later renewal succeeds): \(String(reflecting: error))")
            return
        }
        for lease in held {
            guard let entry = running[lease.id], entry.lease.epoch == lease.epoch else { continue }
            if renewed.contains(lease.id) {
                entry.fence.extend(until: deadline(sentAt: sent))
            } else {
                lost(lease.id)
            }
        }
    }

    // MARK: - Stopping

    private func releaseAll() async {
        stopping = true
        let entries = Array(running.values)
        running = [:]
        for entry in entries {
            let lease = entry.lease
            var bytes = entry.bytes
            var total = entry.totalBytes
            if let download = entry.download {
                _ = await download.pause()
                let progress = download.progress
                bytes = max(bytes, progress.bytesReceived)
                if let known = progress.totalBytes { total = known }
                if case .success(let result) = await Self.outcome(of: download) {
                    // It finished while stopping: record the completion instead.
                    if (try? await record(lease, as: .completed(result))) == true {
                        summary.completed.append(lease.task.id)
                        emit(.completed(lease, result))
                    }
                    continue
                }
            }
            if (try? await record(
                lease, as: .released(bytes: bytes, totalBytes: total))) == true
            {
                summary.released.append(lease.task.id)
                emit(.released(lease))
            }
        }
    }

    private static func outcome(of download: Download) async -> Result<DownloadResult, DownloadError> {
        do throws(DownloadError) {
            return .success(try await download.result())
        } catch {
            return .failure(error)
        }
    }

    private func emit(_ event: Event) {
        eventHandler?(event)
    }

    /// Runs `question` and waits for its answer on the calling thread (an engine or checkpoint thread, never
    /// the cooperative pool): false when it throws or takes longer than `seconds` (``ThreadBridge``).
    static func blockingAnswer(seconds: Double, _ question: @escaping @Sendable () async throws -> Bool) -> Bool {
        ThreadBridge.wait(until: .after(seconds: seconds), question) ?? false
    }

    /// The size of a task's partial file now (0 without one).
    static func partialSize(_ task: ManagedTask) -> Int64 {
        guard let url = try? HTTPURL(task.originalURL) else { return 0 }
        let working = WorkingFiles(destination: task.destination, workingDirectory: nil, url: url)
        var info = stat()
        guard stat(working.partial, &info) == 0 else { return 0 }
        return Int64(info.st_size)
    }
}
