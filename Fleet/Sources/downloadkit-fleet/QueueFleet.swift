import ArgumentParser
import DownloadKit
import DownloadKitCLI
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import Logging
import Synchronization

/// `downloadkit-fleet queue --store postgres://…`: the queue in PostgreSQL, shared by several hosts; `queue run`
/// on each host is one worker of the fleet (docs/FLEET.md). Plugged into the commands of `downloadkit`
/// (``FleetQueue``), which has no PostgreSQL client of its own.
struct QueueFleet: FleetQueue {
    func validate(_ store: String) throws { _ = try Self.storeURL(store) }

    func add(_ store: String, _ requests: [DownloadManager.TaskRequest]) async throws -> [String] {
        try await Self.add(try Self.storeURL(store), requests)
    }

    func list(_ store: String, json: Bool) async throws {
        try Self.printList(try await Self.list(try Self.storeURL(store)), json: json)
    }

    func change(_ store: String, _ selection: TaskSelection, pausing: Bool) async throws {
        try await Self.change(try Self.storeURL(store), selection, pausing: pausing)
    }

    func run(_ store: String, _ run: FleetRun) async throws {
        try await Self.run(try Self.storeURL(store), options: run)
    }

    func watch(_ store: String) async throws {
        let url = try Self.storeURL(store)
        let store = try await Self.open(url)
        do {
            for try await event in store.taskEvents() {
                var object: [String: Any]
                switch event {
                case .listening:
                    object = ["listening": true]
                case .changed(let id, let state, let epoch, let worker):
                    object = ["id": id, "state": state, "epoch": epoch]
                    if let worker { object["worker"] = worker }
                }
                let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
                FileHandle.standardOutput.write(data + Data("\n".utf8))
            }
        } catch {
            await store.close()
            QueueOutput.error("error: the event stream from \(url) ended: \(error)")
            throw ExitCode(Exit.failure)
        }
        await store.close()
    }

    /// The PostgreSQL store `--store` names.
    static func storeURL(_ store: String) throws -> PostgresStoreURL {
        guard let url = PostgresStoreURL(store) else {
            throw ValidationError(
                "--store must be postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (optionally ?sslmode=disable|prefer|require or ?host=/socket/directory); the SQLite queue is --state DIR")
        }
        return url
    }

    static func open(_ url: PostgresStoreURL) async throws -> PostgresTaskStore {
        do {
            return try await PostgresTaskStore.open(url)
        } catch {
            throw QueueSession.failure(error)
        }
    }

    static func add(_ url: PostgresStoreURL, _ requests: [DownloadManager.TaskRequest]) async throws -> [String] {
        let store = try await open(url)
        let results: [(id: String, added: Bool)]
        do {
            results = try await store.add(requests, defaultDirectory: QueuePaths.absolute("."))
        } catch let error as DownloadManagerError where error.code == .invalidURL {
            await store.close()
            throw ValidationError(error.detail)
        } catch {
            await store.close()
            throw QueueSession.failure(error)
        }
        for (request, result) in zip(requests, results) where !result.added {
            QueueOutput.error("note: \(TaskURLRedaction.listing(request.url)) is already in the queue as \(result.id)")
        }
        await store.close()
        return results.map(\.id)
    }

    static func list(_ url: PostgresStoreURL) async throws -> [FleetTask] {
        let store = try await open(url)
        do {
            let tasks = try await store.fleetTasks()
            await store.close()
            return tasks
        } catch {
            await store.close()
            throw QueueSession.failure(error)
        }
    }

    /// `queue run` as a worker of the fleet: until nothing waits or runs anywhere in the queue.
    static func run(_ url: PostgresStoreURL, options: FleetRun) async throws {
        let download = options.download
        let logger = options.logger
        let store = try await open(url)
        if let limit = options.fleetMaxConcurrent {
            do {
                try await store.setFleetMaxConcurrent(limit == 0 ? nil : limit)
            } catch {
                await store.close()
                throw QueueSession.failure(error)
            }
        }
        let workerID = options.workerID ?? "\(ProcessInfo.processInfo.hostName)-\(getpid())"
        var configuration = FleetWorker.Configuration(
            workerID: workerID, maxConcurrent: options.maxConcurrent,
            lease: .milliseconds(Int64(options.leaseSeconds * 1000)),
            pollInterval: .milliseconds(Int64(options.pollSeconds * 1000)),
            busyRetryDelay: .milliseconds(Int64(min(options.pollSeconds, 1) * 1000)),
            download: download, globalRateLimit: options.globalRateLimit,
            identifiesInRequests: options.workerHeader, logger: logger)
        // --user and netrc credentials go to the origins of the tasks this worker runs, each bound as it
        // is claimed (the netrc file is read once now, so a malformed one stops the run at once).
        if let authenticator = download.client.authenticator {
            do {
                try options.bindCredentials(authenticator, [])
            } catch {
                await store.close()
                throw error
            }
            let bind = options.bindCredentials
            configuration.willStart = { task in
                try? bind(authenticator, [task.originalURL, task.currentURL])
            }
        }
        let worker: FleetWorker
        do {
            worker = try FleetWorker(store: store, configuration: configuration)
        } catch {
            await store.close()
            throw QueueSession.failure(error)
        }
        let quiet = options.quiet
        // --on-complete runs beside the worker; the run waits for every one before it exits.
        let hooks = Mutex<[Task<Void, Never>]>([])
        let renderer = ProgressRenderer(mode: .none, count: 0)
        let onComplete = options.onComplete
        await worker.setEventHandler { event in
            switch event {
            case .claimed(let lease, let bytes):
                QueueOutput.error("worker \(workerID): claimed \(lease.task.id) (epoch \(lease.epoch)) with \(bytes) bytes on disk")
            case .completed(let lease, let result):
                QueueOutput.error(
                    "worker \(workerID): completed \(lease.task.id) (epoch \(lease.epoch)) → \(result.path), resumed from byte \(result.resumedFrom)")
                if let onComplete {
                    let hook = Task { await CompletionCommand.run(onComplete, path: result.path, renderer: renderer) }
                    hooks.withLock { $0.append(hook) }
                }
            case .failed(let lease, let error):
                QueueOutput.error("worker \(workerID): \(lease.task.id) failed: \(error.detail)")
            case .lost(let lease, let refused):
                QueueOutput.error(
                    "worker \(workerID): lost the lease on \(lease.task.id) (epoch \(lease.epoch)); stopped writing it (\(refused) writes refused)")
            case .released(let lease):
                QueueOutput.error("worker \(workerID): released \(lease.task.id) (epoch \(lease.epoch)) to the queue")
            case .waitingForWriter(let lease):
                if !quiet { QueueOutput.error("worker \(workerID): \(lease.task.id) is still open in another writer; waiting") }
            case .progress:
                break
            }
        }
        let signals = SignalHandling(rerunHint: "run `downloadkit-fleet queue run --store …` again") {
            await worker.stop()
        }
        signals.install()
        let summary: FleetWorker.Summary
        do {
            summary = try await worker.run()
        } catch {
            await store.close()
            throw QueueSession.failure(error)
        }
        await signals.stopped()
        for hook in hooks.withLock({ $0 }) { await hook.value }
        await renderer.finish()
        await store.close()
        if let code = signals.exitCode, let message = signals.message {
            QueueOutput.error(message)
            throw ExitCode(code)
        }
        if let first = summary.failed.first {
            throw ExitCode(Exit.status(for: first.error))
        }
    }

    /// `pause` / `resume` on the PostgreSQL queue: a running task's worker stops writing at its next heartbeat.
    static func change(_ url: PostgresStoreURL, _ selection: TaskSelection, pausing: Bool) async throws {
        let store = try await open(url)
        do {
            let ids = try selection.resolve(among: try await store.fleetTasks().map(\.task.id))
            let changed = Set(pausing ? try await store.pause(ids) : try await store.resume(ids))
            await store.close()
            if !selection.all {
                for id in ids where !changed.contains(id) {
                    QueueOutput.error("note: \(id) was not \(pausing ? "waiting or running" : "paused, failed or cancelled"); left as it is")
                }
            }
        } catch let exit as ExitCode {
            await store.close()
            throw exit
        } catch {
            await store.close()
            throw QueueSession.failure(error)
        }
    }

    static func printList(_ tasks: [FleetTask], json: Bool) throws {
        if json {
            let objects = tasks.map { fleet -> [String: Any] in
                var object = QueueListing.jsonObject(fleet.task)
                object["leaseEpoch"] = fleet.leaseEpoch
                if let owner = fleet.leaseOwner { object["worker"] = owner }
                object["leaseLive"] = fleet.leaseIsLive
                return object
            }
            let data = try JSONSerialization.data(withJSONObject: objects, options: [.sortedKeys, .prettyPrinted])
            FileHandle.standardOutput.write(data + Data("\n".utf8))
            return
        }
        guard !tasks.isEmpty else { return }
        var rows = [["ID", "STATE", "BYTES", "PRIORITY", "WORKER", "URL", "DESTINATION"]]
        for fleet in tasks {
            let task = fleet.task
            let worker = fleet.leaseOwner.map { fleet.leaseIsLive || task.state != .running ? $0 : $0 + " (expired)" } ?? "-"
            rows.append([
                task.id, task.state.rawValue, QueueListing.bytes(task), String(task.priority.rawValue), worker,
                task.listingURL, QueueListing.destination(task),
            ])
        }
        let widths = (0..<rows[0].count - 1).map { column in rows.map { $0[column].count }.max() ?? 0 }
        var text = ""
        for row in rows {
            var line = ""
            for (column, cell) in row.enumerated() {
                line += column < widths.count ? cell.padding(toLength: widths[column] + 2, withPad: " ", startingAt: 0) : cell
            }
            text += line + "\n"
        }
        FileHandle.standardOutput.write(Data(text.utf8))
    }
}
