import ArgumentParser
import DownloadKit
import DownloadKitManager
import Foundation
import HTTPClient
import Logging

struct QueueRunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Download the queue's waiting tasks until nothing runs or waits.",
        discussion: """
            Tasks that were waiting or running when a previous `queue run` stopped (Ctrl-C, SIGTERM, \
            SIGKILL, a crash) are restored into the waiting line and started: each continues from the bytes \
            already on disk. Tasks paused with `queue pause` stay paused (unless --start-paused-tasks); \
            failed and cancelled tasks stay as they are until `queue resume`. With nothing waiting, `run` \
            returns at once.

            Ctrl-C or SIGTERM stops the running transfers with their progress checkpointed (they stay in \
            the waiting line for the next run) and exits 130 or 143. The exit status is 0 when every task \
            of this run completed, else the status of the first failure (the others still run to the end).

            \(ExitCode.table)
            """
    )

    @ParentCommand var queue: QueueCommand

    @Option(name: .customLong("max-concurrent"), help: "At most this many files at a time, whatever their hosts.")
    var maxConcurrent: Int = 3

    @Option(name: .customLong("max-per-host"), help: "At most this many connections to one host (a file's --connections count too). Default: 8, or --max-concurrent times --connections when that is more; when set lower, the other transfers to that host wait for a free connection.")
    var maxPerHost: Int?

    @Option(name: .customLong("limit-rate"), help: "Bytes per second for all transfers together, e.g. 500K, 10M.")
    var limitRate: String?

    @Option(name: .customLong("connections"), help: "Connections per file (segmented download) for every task of this run; falls back to one when the server has no range support.")
    var connections: Int = 1

    @Option(name: .customLong("progress"), help: "auto, bar, json or none (auto: bar on a terminal, none otherwise).")
    var progress: ProgressMode = .auto

    @OptionGroup var logging: LoggingOptions

    @Option(name: .customLong("on-complete"), help: "Command to run with the file's path as its last argument when each file completes.")
    var onComplete: String?

    @Flag(name: .customLong("start-paused-tasks"), help: "Also start the tasks paused with `queue pause`.")
    var startPausedTasks = false

    @Option(name: .customLong("worker-id"), help: "With --store: this worker's id in the fleet (default: HOST-PID).")
    var workerID: String?

    @Option(name: .customLong("lease"), help: "With --store: seconds a lease lasts without renewal (renewed every third of it); a dead worker's tasks wait this long for another worker (default 30).")
    var leaseSeconds: Double = 30

    @Option(name: .customLong("poll"), help: "With --store: seconds between looks for work when a slot is free (default 1).")
    var pollSeconds: Double = 1

    @Option(name: .customLong("fleet-max-concurrent"), help: "With --store: at most this many tasks at a time in the whole fleet (stored in the database for every worker; 0 removes the limit).")
    var fleetMaxConcurrent: Int?

    @Flag(name: .customLong("worker-header"), help: "With --store: send X-DownloadKit-Worker: ID with every request (diagnostics).")
    var workerHeader = false

    @OptionGroup(title: "Credentials, cookies and client certificates") var auth: AuthOptions

    @OptionGroup var network: NetworkOptions

    mutating func validate() throws {
        if maxConcurrent < 1 { throw ValidationError("--max-concurrent must be at least 1") }
        if let maxPerHost, maxPerHost < 1 { throw ValidationError("--max-per-host must be at least 1") }
        if connections < 1 || connections > 64 { throw ValidationError("--connections must be 1 to 64") }
        if leaseSeconds < 1 { throw ValidationError("--lease must be at least 1 second") }
        if pollSeconds <= 0 { throw ValidationError("--poll must be more than 0 seconds") }
        if let fleetMaxConcurrent, fleetMaxConcurrent < 0 { throw ValidationError("--fleet-max-concurrent must be 0 or more") }
        if let limitRate, RateParser.parse(limitRate) == nil {
            throw ValidationError("--limit-rate must be a number of bytes per second, optionally with K, M or G (e.g. 500K)")
        }
    }

    func run() async throws {
        var download = DownloadConfiguration()
        download.connections = connections
        download.logger = try logging.makeLogger(label: "downloadkit")
        download.client.maxConnectionsPerOrigin = PerHostConnections.cap(
            maxConcurrent: maxConcurrent, connectionsPerFile: connections, explicit: maxPerHost)
        if PerHostConnections.waitsForConnections(
            maxConcurrent: maxConcurrent, connectionsPerFile: connections, cap: download.client.maxConnectionsPerOrigin)
        {
            logging.note(
                "at most \(download.client.maxConnectionsPerOrigin) connections to one host (--max-per-host); transfers beyond that to the same host wait for a free connection")
        }
        download.client.receiveBufferSize = DKHTTPClientConfiguration.receiveBufferSize(
            forConcurrentConnections: maxConcurrent * connections)
        try auth.apply(to: &download.client, urls: [])
        do {
            try network.apply(to: &download.client)
        } catch {
            QueueOutput.error(error.detail)
            throw ExitCode.validationFailure
        }
        if let (fleet, store) = try queue.fleetStore() {
            if startPausedTasks { throw ValidationError("--start-paused-tasks works on the SQLite queue only") }
            var logger = download.logger ?? Logger(label: "downloadkit.fleet", factory: { _ in SwiftLogNoOpLogHandler() })
            logger[metadataKey: "worker"] = .string(workerID ?? "")
            let auth = self.auth
            let run = FleetRun(
                workerID: workerID, maxConcurrent: maxConcurrent, leaseSeconds: leaseSeconds, pollSeconds: pollSeconds,
                fleetMaxConcurrent: fleetMaxConcurrent, globalRateLimit: limitRate.flatMap(RateParser.parse),
                workerHeader: workerHeader, quiet: logging.progressMode(progress) == .none, onComplete: onComplete,
                download: download, logger: logger,
                bindCredentials: { authenticator, urls in try auth.bindCredentials(in: authenticator, to: urls) })
            try await fleet.run(store, run)
            return
        }
        let configuration = DownloadManagerConfiguration(
            maxConcurrentDownloads: maxConcurrent, download: download,
            globalRateLimit: limitRate.flatMap(RateParser.parse))
        let session = try await QueueSession.open(queue.stateDirectory, configuration: configuration)
        let manager = session.manager

        if startPausedTasks {
            do {
                for task in await manager.allTasks() where task.state == .paused {
                    try await manager.resume(taskID: task.id)
                }
            } catch {
                await session.close()
                throw QueueSession.failure(error)
            }
        }
        // The network is still reported unreachable, so nothing has started: every waiting task is this
        // run's work, and the handlers below see all of its events.
        let work = await manager.allTasks().filter { $0.state == .waiting }
        if let authenticator = download.client.authenticator {
            do {
                try auth.bindCredentials(in: authenticator, to: work.map(\.originalURL))
            } catch {
                await session.close()
                throw error
            }
        }
        guard !work.isEmpty else {
            let paused = await manager.allTasks().filter { $0.state == .paused }.count
            await session.close()
            if paused > 0 {
                QueueOutput.error("nothing to do: \(paused) paused task(s); `queue resume` them or use --start-paused-tasks")
            }
            return
        }

        let (updates, continuation) = AsyncStream<QueueUpdate>.makeStream()
        await manager.setEventHandler { event in
            switch event {
            case .progress, .stateChanged, .allFinished: continuation.yield(.event(event))
            default: break
            }
        }
        await manager.setCompletionHandler { completion in continuation.yield(.completion(completion)) }

        let renderer = ProgressRenderer(mode: logging.progressMode(progress), count: work.count)
        // On a signal: close the manager (every running transfer stops with its bytes checkpointed and stays
        // in the waiting line), then end the run loop.
        let signals = SignalHandling(rerunHint: "run `downloadkit queue run` again") { [session, continuation] in
            await renderer.beginShutdown()
            await session.close()
            continuation.finish()
        }
        signals.install()
        let bridge = QueueProgressBridge(tasks: work, renderer: renderer)

        session.network.update(NetworkStatus(isReachable: true, isMetered: false))
        var failures: [DownloadError] = []
        var draining = false
        var unhandled = Set(work.map(\.id))  // this run's tasks whose completion this loop has not handled
        for await update in updates {
            switch update {
            case .event(.stateChanged(let id, .running)):
                await bridge.started(id, bytesOnDisk: await manager.task(id)?.bytesReceived ?? 0)
            case .event(.progress(let id, let progress)):
                await bridge.progress(id, progress)
            case .event:
                break
            case .completion(let completion):
                unhandled.remove(completion.task.id)
                switch completion.result {
                case .success(let result):
                    await bridge.finished(completion.task.id, result)
                    if let onComplete, !signals.isStopping {
                        await CompletionCommand.run(onComplete, path: result.path, renderer: renderer)
                    }
                case .failure(let error):
                    failures.append(error)
                    await bridge.failed(completion.task.id, error)
                }
            }
            // On a signal the handler closes the manager and ends the stream.
            if signals.isStopping || draining { continue }
            // Tasks leave the line only by completing or failing (the lock keeps other commands out), and a
            // task's completion comes after its state change: look only once a completion has been handled.
            guard case .completion = update else { continue }
            // Is anything still running or waiting, or has a task ended whose completion has not reached
            // this loop yet? The manager marks a task completed, commits its row and only then calls the
            // completion handler, so a task can read as completed while its completion is still on its way:
            // ending the stream then would lose its `finished` line and its --on-complete command.
            // Asked in two steps, each cheap (this runs after every completion; a sorted copy of every task
            // here made a run of 1,024 tasks quadratic): once the manager is idle it stays idle (nothing
            // waits, so nothing can start; the lock keeps other commands out; failed tasks stay failed), so
            // the states read after it are final.
            guard await manager.isIdle else { continue }
            var undelivered = false
            for id in unhandled {
                switch await manager.task(id)?.state {
                case .completed, .failed: undelivered = true
                case .waiting, .running, .paused, .cancelled, nil: break
                }
                if undelivered { break }
            }
            if !undelivered {
                // Done: every completion of this run's work has been handled.
                draining = true
                continuation.finish()
            }
        }
        if !signals.isStopping { await session.close() }
        await signals.stopped()
        await renderer.finish()
        try? download.client.cookieJar?.save()
        if let code = signals.exitCode, let message = signals.message {
            QueueOutput.error(message)
            throw ExitCode(code)
        }
        if let first = failures.first {
            throw ExitCode(Exit.status(for: first))
        }
    }
}

/// What the run loop handles: the manager's events and its completion callbacks, in the manager's order.
enum QueueUpdate: Sendable {
    case event(ManagerEvent)
    case completion(TaskCompletion)
}

/// Feeds the manager's per-task events to the `get` command's ``ProgressRenderer`` as download events.
actor QueueProgressBridge {
    private let renderer: ProgressRenderer
    private var index: [String: Int] = [:]
    private var url: [String: String] = [:]

    init(tasks: [ManagedTask], renderer: ProgressRenderer) {
        self.renderer = renderer
        for (position, task) in tasks.enumerated() {
            index[task.id] = position
            url[task.id] = task.originalURL
        }
    }

    private func row(_ id: String) -> (Int, String) {
        if let position = index[id], let address = url[id] { return (position, address) }
        let position = index.count
        index[id] = position
        url[id] = id
        return (position, id)
    }

    func started(_ id: String, bytesOnDisk: Int64) async {
        let (position, address) = row(id)
        let reason: DownloadStateReason = bytesOnDisk > 0 ? .resumed(offset: bytesOnDisk) : .started
        await renderer.handle(.stateChanged(.connecting, reason), index: position, url: address)
    }

    func progress(_ id: String, _ progress: DownloadProgress) async {
        let (position, address) = row(id)
        await renderer.handle(.progress(progress), index: position, url: address)
    }

    func finished(_ id: String, _ result: DownloadResult) async {
        let (position, address) = row(id)
        await renderer.handle(.finished(result), index: position, url: address)
    }

    func failed(_ id: String, _ error: DownloadError) async {
        let (position, address) = row(id)
        await renderer.handle(.failed(error), index: position, url: address)
    }
}

