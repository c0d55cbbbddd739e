@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import TestOrigin

/// Claims per second: `tasks` queued in a fresh database, then `workers` concurrent workers — each its own
/// `PostgresTaskStore` (its own connection pool), as separate `queue run` processes would be, here as tasks of
/// this process — claim one task at a time and record it completed until the queue is empty.
///
/// A worker does what `FleetWorker` does per task, through the same API and without a transfer:
/// `claim(worker:count:lease:)` (the advisory lock, the fleet-limit count, `FOR UPDATE SKIP LOCKED`, the
/// lease row) and `finish(_:worker:as: .completed)` (the epoch-fenced update and the lease's end). The
/// clock runs from the moment every worker is connected and registered to the moment the last one found
/// the queue empty. Every run is checked: each task claimed exactly once, under epoch 1, in this process's
/// tally and in the database (every row completed, one lease each).
struct ClaimsRun {
    var server: PostgresServer
    var workers: Int
    var tasks: Int
    /// A unique database name for this run (a fresh schema, so every run starts from the same table).
    var database: String
    /// Where the tasks' (never written) destinations point.
    var directory: String

    /// The lease each claim takes: long enough that none runs out during a run (a lease taken over would be a
    /// second claim, which the check refuses).
    static let lease: Duration = .seconds(600)

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs once; returns the seconds from start to empty queue.
    func run() async throws -> Double {
        let server = self.server
        let database = self.database
        try await offloaded { try server.createDatabase(database) }
        guard let url = PostgresStoreURL(server.url(database: database)) else {
            throw Failure(description: "not a store URL: \(server.url(database: database))")
        }
        let queued = try await Self.queue(tasks, at: url, directory: directory, prefix: "claims")

        var stores: [(worker: String, store: PostgresTaskStore)] = []
        for index in 0..<workers {
            let worker = "bench-\(workers)w-\(index)"
            let store = try await PostgresTaskStore.open(url)
            try await store.register(worker: worker, maxConcurrent: 1)
            stores.append((worker, store))
        }
        let start = ContinuousClock.now
        let claims: [ClaimTally.Claim]
        do {
            claims = try await withThrowingTaskGroup(of: [ClaimTally.Claim].self) { group in
                for (worker, store) in stores {
                    group.addTask { try await Self.work(worker, store) }
                }
                var all: [ClaimTally.Claim] = []
                for try await part in group { all += part }
                return all
            }
        } catch {
            for (_, store) in stores { await store.close() }
            throw error
        }
        let seconds = secondsSince(start)
        for (_, store) in stores { await store.close() }

        var problems = ClaimTally(queued: Set(queued), claims: claims).problems()
        problems += try await Self.databaseProblems(url, expected: queued.count)
        guard problems.isEmpty else {
            throw Failure(
                description: "\(workers) workers, \(tasks) tasks: not every task was claimed exactly once:\n  "
                    + problems.joined(separator: "\n  "))
        }
        return seconds
    }

    /// One worker: claim one task, record it completed, until a claim finds nothing.
    private static func work(_ worker: String, _ store: PostgresTaskStore) async throws -> [ClaimTally.Claim] {
        var claims: [ClaimTally.Claim] = []
        while true {
            let leases = try await store.claim(worker: worker, count: 1, lease: lease)
            if leases.isEmpty { return claims }
            for lease in leases {
                let task = lease.task
                let result = DownloadResult(
                    path: task.path ?? "", bytes: 0, resumedFrom: 0, bytesTransferred: 0, finalURL: task.currentURL,
                    checksumHex: nil, isResumable: false)
                let finished = try await store.finish(lease, worker: worker, as: .completed(result))
                claims.append(ClaimTally.Claim(taskID: task.id, epoch: lease.epoch, worker: worker, finished: finished))
            }
        }
    }

    /// What the database says after the run: every row completed under epoch 1, one lease per task, each
    /// ended as completed.
    private static func databaseProblems(_ url: PostgresStoreURL, expected: Int) async throws -> [String] {
        let store = try await PostgresTaskStore.open(url)
        let rows: [FleetTask]
        let history: [LeaseRecord]
        do {
            rows = try await store.fleetTasks()
            history = try await store.leaseHistory()
        } catch {
            await store.close()
            throw error
        }
        await store.close()
        var problems: [String] = []
        if rows.count != expected { problems.append("the database holds \(rows.count) tasks, \(expected) were queued") }
        let unfinished = rows.filter { $0.task.state != .completed || $0.leaseEpoch != 1 }
        if !unfinished.isEmpty {
            problems.append(
                "\(unfinished.count) rows not completed under epoch 1: "
                    + unfinished.prefix(5).map { "\($0.task.id) \($0.task.state) epoch \($0.leaseEpoch)" }.joined(separator: "; "))
        }
        if history.count != expected || history.contains(where: { $0.epoch != 1 || $0.outcome != "completed" }) {
            let odd = history.filter { $0.epoch != 1 || $0.outcome != "completed" }
            problems.append(
                "lease history: \(history.count) leases for \(expected) tasks, \(odd.count) not a completed epoch 1: "
                    + odd.prefix(5).map { "\($0.taskID) epoch \($0.epoch) \($0.outcome ?? "held")" }.joined(separator: "; "))
        }
        return problems
    }

    /// Adds `count` tasks to the store at `url` with `PostgresTaskStore.add`, 1,000 per call (one transaction
    /// each); returns their ids.
    static func queue(_ count: Int, at url: PostgresStoreURL, directory: String, prefix: String) async throws -> [String] {
        let store = try await PostgresTaskStore.open(url)
        do {
            var ids: [String] = []
            ids.reserveCapacity(count)
            for first in stride(from: 0, to: count, by: 1000) {
                let requests = (first..<min(count, first + 1000)).map { index in
                    taskRequest(index, prefix: prefix, directory: directory)
                }
                let added = try await store.add(requests, defaultDirectory: directory)
                guard added.allSatisfy(\.added) else { throw Failure(description: "a task was not added (a duplicate URL?)") }
                ids += added.map(\.id)
            }
            await store.close()
            return ids
        } catch {
            await store.close()
            throw error
        }
    }
}

/// Task `index`: a URL nobody serves (nothing is downloaded) and a file destination under `directory`.
func taskRequest(_ index: Int, prefix: String, directory: String) -> DownloadManager.TaskRequest {
    DownloadManager.TaskRequest(
        url: "http://127.0.0.1:9/\(prefix)/task-\(index).bin", destination: .file("\(directory)/task-\(index).bin"))
}
